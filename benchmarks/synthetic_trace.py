"""Writes a deterministic torch.profiler trace of any size (a GPU run, marked or not), to time readers on."""
from __future__ import annotations

import argparse
import math
import random
import shutil
import tempfile
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

# Identity of the pretend run. Layout, keys and arg order follow what torch 2.13 (kineto)
# writes, so a parser pays here what it pays on a real file: every key of every event.
HOST_PID = MAIN_TID = 4187
AUTOGRAD_TID = 4246  # CUDA backward runs on the autograd engine's device thread
DEVICE, STREAM, SM_COUNT = 0, 7, 108
BASE_TIME_NS = 1790857026000000000
START_NS = 4_432_814_179_695_967
DATASET_ROWS = 1_281_167  # e.g. ImageNet-1k train images as 1024-d features


@dataclass(frozen=True)
class TraceShape:
    """The run the trace pretends to record: an MLP on one GPU with per-parameter RMSprop.
    The defaults give about 140k events and 56 MB, the size of design.md's reference trace."""

    events: int = 140_000  # steps are added until the trace holds at least this many events
    layers: int = 8
    width: int = 1024
    classes: int = 1000
    batch: int = 256  # as the mlp workload
    seed: int = 0
    # False: no gapscope/<phase> ranges, only what torch.profiler records by itself in a loop
    # nobody marked (a foreign trace: the breakdown infers forward).
    marked: bool = True


@dataclass(frozen=True)
class _Kernel:
    name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    registers: int
    dur_ns: tuple[int, int]
    shared_memory: int = 0


def _elementwise(functor: str, arrays: int, dur_ns=(2_000, 9_000)) -> _Kernel:
    body = f"at::native::{functor}, at::detail::Array<char*, {arrays}>"
    return _Kernel(f"void at::native::vectorized_elementwise_kernel<4, {body} >(int, {body})",
                   (512, 1, 1), (128, 1, 1), 26, dur_ns)


GEMM_TN = _Kernel("ampere_sgemm_128x64_tn", (8, 16, 1), (128, 1, 1), 122, (18_000, 40_000), 32_768)
GEMM_NN = _Kernel("ampere_sgemm_64x64_nn", (16, 1, 1), (128, 1, 1), 90, (15_000, 35_000), 16_384)
GEMM_NT = _Kernel("ampere_sgemm_128x32_nt", (8, 32, 1), (256, 1, 1), 64, (15_000, 35_000), 16_384)
CLAMP = _elementwise("(anonymous namespace)::launch_clamp_scalar(at::TensorIteratorBase&, c10::Scalar, "
                     "c10::Scalar, at::native::detail::ClampLimits)::{lambda()#1}::operator()() const::"
                     "{lambda()#14}::operator()() const::{lambda(float)#1}", 2)
THRESHOLD = _elementwise("(anonymous namespace)::threshold_kernel_impl<float>(at::TensorIteratorBase&, "
                         "float, float)::{lambda(float, float)#1}", 3)
FILL = _elementwise("FillFunctor<float>", 1)
SUM = _Kernel("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::"
              "func_wrapper_t<float, at::native::sum_functor<float, float, float>::operator()"
              "(at::TensorIterator&)::{lambda(float, float)#1}>, unsigned int, float, 4, 4> >"
              "(at::native::ReduceOp<float, at::native::func_wrapper_t<float, at::native::"
              "sum_functor<float, float, float>::operator()(at::TensorIterator&)::"
              "{lambda(float, float)#1}>, unsigned int, float, 4, 4>)",
              (8, 1, 1), (32, 16, 1), 32, (4_000, 9_000), 16)
SOFTMAX = _Kernel("void (anonymous namespace)::cunn_SoftMaxForward<4, float, float, float, "
                  "(anonymous namespace)::LogSoftMaxForwardEpilogue>(float*, float const*, int)",
                  (64, 1, 1), (512, 1, 1), 37, (5_000, 12_000), 2048)
SOFTMAX_BACKWARD = _Kernel("void (anonymous namespace)::cunn_SoftMaxBackward<4, float, float, float, "
                           "(anonymous namespace)::LogSoftMaxBackwardEpilogue>(float*, float const*, "
                           "float const*, int)", (64, 1, 1), (512, 1, 1), 30, (5_000, 12_000), 2048)
NLL = _Kernel("void at::native::(anonymous namespace)::nll_loss_forward_reduce_cuda_kernel_2d<float, "
              "float, long>(float*, float*, float const*, long const*, float const*, bool, long, long, "
              "long, long)", (1, 1, 1), (32, 1, 1), 30, (3_000, 6_000), 256)
NLL_BACKWARD = _Kernel("void at::native::(anonymous namespace)::nll_loss_backward_reduce_cuda_kernel_2d"
                       "<float, long>(float*, float const*, long const*, float const*, float const*, "
                       "bool, int, int, long, long)", (1, 1, 1), (32, 1, 1), 22, (3_000, 6_000))
RMSPROP = {  # the per-parameter (foreach=False) update: one kernel per op and parameter
    "aten::mul_": _elementwise("AUnaryFunctor<float, float, float, at::native::binary_internal::"
                               "MulFunctor<float> >", 2),
    "aten::addcmul_": _elementwise("addcmul_cuda_kernel(at::TensorIteratorBase&, c10::Scalar const&)::"
                                   "{lambda()#2}::operator()() const::{lambda(float, float, float)#1}", 4),
    "aten::sqrt": _elementwise("sqrt_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::operator()() "
                               "const::{lambda(float)#1}", 2),
    "aten::add_": _elementwise("CUDAFunctorOnSelf_add<float>", 2),
    "aten::addcdiv_": _elementwise("addcdiv_cuda_kernel(at::TensorIteratorBase&, c10::Scalar const&)::"
                                   "{lambda()#2}::operator()() const::{lambda(float, float, float)#1}", 4),
}


def write_synthetic_trace(path: str | Path, shape: TraceShape = TraceShape()) -> int:
    """Write the trace as plain `.pt.trace.json`; returns the number of events written.
    Written a step at a time (the device part through a temporary file, since kineto puts it
    after every host range), so a trace of gigabytes needs no more memory than one step."""
    path = Path(path)
    builder = _TraceBuilder(shape.seed)
    head = _metadata_events()
    with open(path, "w") as out, tempfile.TemporaryFile("w+", dir=path.parent) as device:
        out.write(_HEADER)
        out.writelines(event + ",\n" for event in head)
        number = 0
        while builder.count < shape.events:
            _step(builder, number, shape)
            number += 1
            host, cupti = builder.take()
            out.writelines(event + ",\n" for event in host)
            device.writelines(event + ",\n" for event in cupti)
        device.seek(0)
        shutil.copyfileobj(device, out, 16 << 20)
        tail = _closing_events(builder.end_ns)
        out.write(",\n".join(tail) + f'\n  ],"traceName": "{path}" }}')
    return builder.count + len(head) + len(tail)


# --- what one training step records ------------------------------------------------------


def _step(b: "_TraceBuilder", number: int, shape: TraceShape) -> None:
    def mark(phase: str):
        return b.op(f"gapscope/{phase}", cat="user_annotation") if shape.marked else nullcontext()

    with b.op(f"ProfilerStep#{number}", cat="user_annotation"):
        with mark("data_load"):
            _data_load(b, shape)
        with mark("optimizer"):
            with b.op("Optimizer.zero_grad#RMSprop.zero_grad", cat="user_annotation"):
                pass  # set_to_none: no op at all
        with mark("forward"):
            links = _forward(b, shape)
        with mark("backward"):
            _backward(b, shape, links)
        with mark("optimizer"):
            _optimizer_step(b, shape)


def _layers(shape: TraceShape) -> list[tuple[int, int]]:
    """(fan_in, fan_out) of each Linear."""
    return [(shape.width, shape.width)] * (shape.layers - 1) + [(shape.width, shape.classes)]


def _data_load(b, shape: TraceShape) -> None:
    features = (DATASET_ROWS, shape.width)
    labels = ("long", (DATASET_ROWS,))
    with b.op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", cat="user_annotation"):
        for _ in range(shape.batch):  # TensorDataset.__getitem__: one select per tensor and sample
            index = _scalar(b.randint(0, DATASET_ROWS - 1))
            for source in (_tensor(*features), labels):
                with b.op("aten::select", (source, _scalar(0), index), autograd=True):
                    with b.op("aten::as_strided", (source, _list(shape.width), _list(1), _none())):
                        pass
        for row in (_tensor(shape.width), ("long", ())):  # default_collate: torch.stack
            with b.op("aten::stack", (("TensorList", None), _scalar(0)), autograd=True):
                for _ in range(shape.batch):
                    with b.op("aten::unsqueeze", (row, _scalar(0))):
                        with b.op("aten::as_strided", (row, _list(1, shape.width), _list(shape.width, 1),
                                                       _none())):
                            pass
                with b.op("aten::cat", (("TensorList", None), _scalar(0))):
                    pass
    for dims, dtype, size in (((shape.batch, shape.width), "float", 4), ((shape.batch,), "long", 8)):
        _to_device(b, (dtype, dims), size * math.prod(dims))


def _to_device(b, source, nbytes: int) -> None:
    with b.op("aten::to", (source, _none(), _none(), _none(), _none(), _scalar("True"), _scalar("False"))):
        with b.op("aten::_to_copy", (source, _none(), _none(), _none(), _none(), _scalar("True"))):
            with b.op("aten::empty_strided", (_list(*source[1]), _list(1), _scalar(6), _none())):
                pass
            with b.op("aten::copy_", (source, source, _scalar("True"))):
                b.memcpy(nbytes)


def _forward(b, shape: TraceShape):
    """Forward ops; returns the autograd links the backward nodes close."""
    layer_links = []
    x = (shape.batch, shape.width)
    for i, (fan_in, fan_out) in enumerate(_layers(shape)):
        weight = (fan_out, fan_in)
        with b.op("aten::linear", _tensors(x, weight, (fan_out,)), autograd=True):
            with b.op("aten::t", _tensors(weight), records_grad=True) as t_link:
                _transpose(b, weight)
            with b.op("aten::addmm", _tensors((fan_out,), x, (fan_in, fan_out)) + (_scalar(1), _scalar(1)),
                      records_grad=True) as mm_link:
                b.launch(GEMM_TN)
        x = (shape.batch, fan_out)
        relu_link = None
        if i < shape.layers - 1:
            with b.op("aten::relu", _tensors(x), records_grad=True) as relu_link:
                with b.op("aten::clamp_min", _tensors(x) + (_scalar(0),)):
                    b.launch(CLAMP)
        layer_links.append((t_link, mm_link, relu_link))
    labels = ("long", (shape.batch,))
    with b.op("aten::cross_entropy_loss", _tensors(x) + (labels, _none(), _scalar(1), _scalar(-100)),
              autograd=True):
        with b.op("aten::log_softmax", _tensors(x) + (_scalar(1), _none()), autograd=True):
            with b.op("aten::_log_softmax", _tensors(x) + (_scalar(1), _scalar("False")),
                      records_grad=True) as softmax_link:
                b.launch(SOFTMAX)
        with b.op("aten::nll_loss_nd", _tensors(x) + (labels, _none(), _scalar(1), _scalar(-100)),
                  autograd=True):
            with b.op("aten::nll_loss", _tensors(x) + (labels, _none(), _scalar(1), _scalar(-100)),
                      autograd=True):
                with b.op("aten::nll_loss_forward", _tensors(x) + (labels, _none(), _scalar(1)),
                          records_grad=True) as nll_link:
                    b.launch(NLL)
    return layer_links, (softmax_link, nll_link)


def _backward(b, shape: TraceShape, links) -> None:
    layer_links, (softmax_link, nll_link) = links
    logits = (shape.batch, shape.classes)
    with b.node("NllLossBackward0", nll_link):
        with b.op("aten::nll_loss_backward", _tensors((), logits) + (("long", (shape.batch,)),)):
            with b.op("aten::zero_", _tensors(logits)):
                b.launch(FILL)
            b.launch(NLL_BACKWARD)
    with b.node("LogSoftmaxBackward0", softmax_link):
        with b.op("aten::_log_softmax_backward_data", _tensors(logits, logits) + (_scalar(1), _scalar(6))):
            b.launch(SOFTMAX_BACKWARD)
    layers = _layers(shape)
    for i in reversed(range(len(layers))):
        _linear_backward(b, shape.batch, layers[i], layer_links[i], needs_input_grad=i > 0)
        if i > 0:
            hidden = _tensors((shape.batch, layers[i][0]))
            with b.node("ReluBackward0", layer_links[i - 1][2]):
                with b.op("aten::threshold_backward", hidden * 2 + (_scalar(0),)):
                    b.launch(THRESHOLD)


def _linear_backward(b, batch: int, layer: tuple[int, int], links, needs_input_grad: bool) -> None:
    fan_in, fan_out = layer
    t_link, mm_link, _ = links
    grad = (batch, fan_out)
    with b.node("AddmmBackward0", mm_link):
        if needs_input_grad:
            with b.op("aten::t", _tensors((fan_in, fan_out))):
                _transpose(b, (fan_in, fan_out))
            with b.op("aten::mm", _tensors(grad, (fan_out, fan_in))):
                b.launch(GEMM_NN)
        with b.op("aten::t", _tensors(grad)):
            _transpose(b, grad)
        with b.op("aten::mm", _tensors((fan_out, batch), (batch, fan_in))):
            b.launch(GEMM_NT)
        with b.op("aten::t", _tensors((fan_out, fan_in))):
            _transpose(b, (fan_out, fan_in))
        with b.op("aten::sum", _tensors(grad) + (_list(0), _scalar("True"), _none())):
            b.launch(SUM)
        with b.op("aten::view", _tensors((1, fan_out)) + (_list(fan_out),)):
            pass
    with b.node("TBackward0", t_link):
        with b.op("aten::t", _tensors((fan_in, fan_out))):
            _transpose(b, (fan_in, fan_out))
    for param in ((fan_out, fan_in), (fan_out,)):
        with b.node("torch::autograd::AccumulateGrad", None):
            with b.op("aten::detach", _tensors(param)):
                with b.op("detach", _tensors(param)):
                    pass


def _optimizer_step(b, shape: TraceShape) -> None:
    with b.op("Optimizer.step#RMSprop.step", cat="user_annotation"):
        for fan_in, fan_out in _layers(shape):
            for param in ((fan_out, fan_in), (fan_out,)):
                one, three = _tensors(param), _tensors(param, param, param)
                for name, inputs in (("aten::mul_", one + (_scalar(0.99),)),
                                     ("aten::addcmul_", three + (_scalar(0.01),)),
                                     ("aten::sqrt", one), ("aten::add_", one + (_scalar(1e-08),)),
                                     ("aten::addcdiv_", three + (_scalar(-0.0001),))):
                    with b.op(name, inputs):
                        b.launch(RMSPROP[name])


def _transpose(b, dims: tuple[int, int]) -> None:
    rows, cols = dims
    with b.op("aten::transpose", _tensors(dims) + (_scalar(0), _scalar(1))):
        with b.op("aten::as_strided", _tensors(dims) + (_list(cols, rows), _list(1, cols), _none())):
            pass


# Op inputs as record_shapes sees them: (type, dims) for a tensor, (type, concrete value) else.
def _tensor(*dims: int):
    return ("float", dims)


def _tensors(*shapes):
    return tuple(_tensor(*dims) for dims in shapes)


def _scalar(value):
    return ("Scalar", str(value))


def _list(*values: int):
    return ("ScalarList", f"[{', '.join(map(str, values))}]")


def _none():
    return ("", "")


# --- writing events ----------------------------------------------------------------------


@dataclass(frozen=True)
class _GradLink:
    """A forward op that recorded an autograd node: its sequence number and fwdbwd flow id
    (0: no flow; kineto's ids start at 1)."""

    sequence: int
    flow: int


class _TraceBuilder:
    """Builds the event list in kineto's order: host ranges by start time, then what CUPTI
    reported (runtime calls, kernels, copies, with their ac2g flows)."""

    def __init__(self, seed: int):
        self._rng = random.Random(seed)
        self._host: list[str | None] = []  # a slot per range, filled when it closes
        self._cupti: list[str] = []
        self.count = 0
        self._now = START_NS
        self._gpu_free = START_NS
        self._external = self._correlation = self._sequence = self._flow = 0
        self._open: list[tuple[int, int]] = []  # (external id, tid) of the enclosing ranges

    def randint(self, lo: int, hi: int) -> int:
        return self._rng.randint(lo, hi)

    def _advance(self, lo: int, hi: int) -> int:
        self._now += self._rng.randint(lo, hi)
        return self._now

    @contextmanager
    def op(self, name: str, inputs=(), *, cat: str = "cpu_op", tid: int | None = None,
           autograd: bool = False, records_grad: bool = False, backward_of: _GradLink | None = None):
        """One host range; its children are whatever runs inside the `with`. `autograd`: the op
        went through the autograd layer (it carries the current sequence number); `records_grad`:
        it also created a node (a new sequence number and a fwdbwd flow to `backward_of`)."""
        tid = tid or (self._open[-1][1] if self._open else MAIN_TID)
        slot = len(self._host)
        self._host.append(None)
        start = self._advance(300, 2_500)
        self._external += 1
        external = self._external
        link = None
        if records_grad:
            self._sequence += 1
            self._flow += 1
            link = _GradLink(self._sequence, self._flow)
        node = link or backward_of
        sequence = node.sequence if node else (self._sequence if autograd else None)
        args = _op_args(external, sequence, backward_of is not None, inputs)
        self._open.append((external, tid))
        yield link
        self._open.pop()
        duration = self._advance(300, 3_000) - start
        text = _complete(cat, name, HOST_PID, tid, start, duration, args)
        flow = node.flow if node else 0
        if flow:
            text += ",\n" + _flow("f" if backward_of else "s", "fwdbwd", flow, HOST_PID, tid, start)
        self._host[slot] = text
        self.count += 1 + bool(flow)

    @contextmanager
    def node(self, name: str, forward: _GradLink | None):
        """An autograd node run by the engine, wrapped in evaluate_function as torch records it."""
        wrapper = forward and _GradLink(forward.sequence, flow=0)  # the flow ends on the node
        with self.op(f"autograd::engine::evaluate_function: {name}", tid=AUTOGRAD_TID,
                     backward_of=wrapper):
            with self.op(name, backward_of=forward):
                yield

    def launch(self, kernel: _Kernel) -> None:
        correlation, start = self._runtime_call("cudaLaunchKernel", 211)
        begin, duration = self._device_slot(start, kernel.dur_ns)
        self._device_event("kernel", kernel.name, begin, duration,
                           _kernel_args(kernel, self._open[-1][0], correlation), correlation)

    def memcpy(self, nbytes: int) -> None:
        correlation, start = self._runtime_call("cudaMemcpyAsync", 41)
        begin, duration = self._device_slot(start, (nbytes // 20 + 1_000, nbytes // 10 + 2_000))
        args = (f'"External id": {self._open[-1][0]},\n      "device": {DEVICE}, "context": 1,\n'
                f'      "stream": {STREAM}, "correlation": {correlation},\n'
                f'      "bytes": {nbytes}, "memory bandwidth (GB/s)": {nbytes / duration!r}{_GRAPH_NODE}')
        self._device_event("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", begin, duration, args,
                           correlation)

    def _runtime_call(self, name: str, cbid: int) -> tuple[int, int]:
        external, tid = self._open[-1]
        self._correlation += 1
        start = self._advance(500, 1_500)
        duration = self._advance(2_500, 6_000) - start
        args = f'"External id": {external},\n      "cbid": {cbid}, "correlation": {self._correlation}'
        self._cupti.append(_complete("cuda_runtime", name, HOST_PID, tid, start, duration, args))
        self._cupti.append(_flow("s", "ac2g", self._correlation, HOST_PID, tid, start))
        self.count += 2
        return self._correlation, start

    def _device_slot(self, launched: int, dur_ns: tuple[int, int]) -> tuple[int, int]:
        """Kernels queue on one stream: each starts after its launch and after the previous one."""
        begin = max(self._gpu_free, launched + self._rng.randint(3_000, 8_000))
        duration = self._rng.randint(*dur_ns)
        self._gpu_free = begin + duration
        return begin, duration

    def _device_event(self, cat, name, begin, duration, args, correlation) -> None:
        self._cupti.append(_complete(cat, name, DEVICE, STREAM, begin, duration, args))
        self._cupti.append(_flow("f", "ac2g", correlation, DEVICE, STREAM, begin))
        self.count += 2

    def take(self) -> tuple[list[str], list[str]]:
        """The host ranges and CUPTI events recorded since the last call; only between steps,
        when every range has closed."""
        assert not self._open, "a range is still open"
        host, cupti = self._host, self._cupti
        self._host, self._cupti = [], []
        return host, cupti

    @property
    def end_ns(self) -> int:
        return max(self._now, self._gpu_free)


# --- JSON text, as kineto formats it -----------------------------------------------------


# CUDA 12 builds add the CUDA-graph ids to every device activity (0: not in a graph).
_GRAPH_NODE = ',\n      "graph id": 0, "graph node id": 0'


def _us(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def _complete(cat, name, pid, tid, start_ns, dur_ns, args) -> str:
    return (f'  {{\n    "ph": "X",\n    "cat": "{cat}",\n    "name": "{name}",\n    "pid": {pid},\n'
            f'    "tid": {tid},\n    "ts": {_us(start_ns)},\n    "dur": {_us(dur_ns)}\n    ,\n'
            f'    "args": {{\n      {args}\n    }}\n  }}')


def _flow(ph, cat, flow_id, pid, tid, ts_ns) -> str:
    binding = ', "bp": "e"' if ph == "f" else ""
    return (f'  {{\n    "ph": "{ph}",\n    "id": {flow_id},\n    "pid": {pid},\n    "tid": {tid},\n'
            f'    "ts": {_us(ts_ns)},\n    "cat": "{cat}",\n    "name": "{cat}"\n    {binding}\n  }}')


def _op_args(external: int, sequence: int | None, backward: bool, inputs) -> str:
    autograd = (f'"Sequence number": {sequence}, "Fwd thread id": {int(backward)}, '
                if sequence is not None else "")
    return (f'"External id": {external},{autograd}"Record function id": 0, '
            f'{_input_args(inputs)}"Ev Idx": {external - 1}')


@lru_cache(maxsize=8192)
def _input_args(inputs) -> str:
    if not inputs:
        return ""
    concrete, types, strides, dims = [], [], [], []
    for kind, value in inputs:
        is_tensor = isinstance(value, tuple)
        concrete.append("" if is_tensor or value is None else value)
        types.append(kind)
        dims.append(list(value) if is_tensor else [])
        strides.append(_contiguous_strides(value) if is_tensor else [])
    quoted = lambda items: "[" + ", ".join(f'"{i}"' for i in items) + "]"  # noqa: E731
    return (f'"Concrete Inputs": {quoted(concrete)}, "Input type": {quoted(types)}, '
            f'"Input Strides": {strides}, "Input Dims": {dims}, ')


def _contiguous_strides(dims: tuple[int, ...]) -> list[int]:
    strides, step = [], 1
    for d in reversed(dims):
        strides.append(step)
        step *= d
    return strides[::-1]


def _kernel_args(kernel: _Kernel, external: int, correlation: int) -> str:
    blocks = math.prod(kernel.grid) / SM_COUNT
    warps = blocks * math.prod(kernel.block) / 32
    occupancy = min(100, int(0.5 + warps / 64 * 100))
    return (f'"External id": {external},\n      "queued": 0, "device": {DEVICE}, "context": 1,\n'
            f'      "stream": {STREAM}, "correlation": {correlation},\n'
            f'      "registers per thread": {kernel.registers},\n'
            f'      "shared memory": {kernel.shared_memory},\n'
            f'      "blocks per SM": {blocks:.6f},\n      "warps per SM": {warps:.6f},\n'
            f'      "grid": [{", ".join(map(str, kernel.grid))}],\n'
            f'      "block": [{", ".join(map(str, kernel.block))}],\n'
            f'      "est. achieved occupancy %": {occupancy}{_GRAPH_NODE}')


def _metadata_event(name: str, pid, tid, key: str, value) -> str:
    value = f'"{value}"' if isinstance(value, str) else value
    pid = f'"{pid}"' if isinstance(pid, str) else pid
    return (f'  {{\n    "ph": "M",\n    "name": "{name}",\n    "ts": {_us(START_NS)},\n    "pid": {pid},\n'
            f'    "tid": {tid},\n    "args": {{\n      "{key}": {value}\n    }}\n  }}')


def _metadata_events() -> list[str]:
    events = []
    for pid, label, sort_index in ((HOST_PID, "CPU", HOST_PID), (DEVICE, f"GPU {DEVICE}", 16777216)):
        events += [_metadata_event("process_name", pid, 0, "name", "python"),
                   _metadata_event("process_labels", pid, 0, "labels", label),
                   _metadata_event("process_sort_index", pid, 0, "sort_index", sort_index)]
    for pid, tid, name in ((HOST_PID, MAIN_TID, f"thread {MAIN_TID} (python)"),
                           (HOST_PID, AUTOGRAD_TID, f"thread {AUTOGRAD_TID} (pt_autograd_0)"),
                           (DEVICE, STREAM, f"stream {STREAM} ")):
        events += [_metadata_event("thread_name", pid, tid, "name", name),
                   _metadata_event("thread_sort_index", pid, tid, "sort_index", tid)]
    return events


def _closing_events(end_ns: int) -> list[str]:
    span = _complete("Trace", "PyTorch Profiler (0)", '"Spans"', '"PyTorch Profiler"', START_NS,
                     end_ns - START_NS, '"Op count": 0')
    return [span, _metadata_event("process_sort_index", "Spans", 0, "sort_index", 536870912),
            _instant("Iteration Start: PyTorch Profiler", '"Traces"', '"Trace PyTorch Profiler"', START_NS),
            _instant("Record Window End", '""', '""', end_ns + 50_000)]


def _instant(name, pid, tid, ts_ns) -> str:
    return (f'  {{\n    "ph": "i",\n    \n    "s": "g",\n    "name": "{name}",\n    "pid": {pid},\n'
            f'    "tid": {tid},\n    "ts": {_us(ts_ns)}\n    \n  }}')


_DEVICE_PROPERTIES = """
      {
      "id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 85097971712,
      "computeMajor": 8, "computeMinor": 0,
      "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
      "regsPerBlock": 65536, "warpSize": 32,
      "sharedMemPerBlock": 49152, "numSms": 108
    , "regsPerMultiprocessor": 65536, "sharedMemPerBlockOptin": 166912, "sharedMemPerMultiprocessor": 167936
    }"""
_HEADER = (f' {{\n    "schemaVersion": 1,\n    "deviceProperties": [{_DEVICE_PROPERTIES}\n    ],\n'
           f'      "cupti_version": 26,\n      "cuda_runtime_version": 12080,\n'
           f'      "cuda_driver_version": 12080,\n      "trace_id": "5F2B3A7C91D04E6B8A1C2D3E4F506172",\n'
           f'      "host_name": "gpu-node",\n    "displayTimeUnit": "ms",\n'
           f'    "baseTimeNanoseconds": {BASE_TIME_NS},\n    "traceEvents": [\n    \n')


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path, help="where to write the .pt.trace.json")
    parser.add_argument("--events", type=int, default=TraceShape.events,
                        help="at least this many events (default %(default)s, about 56 MB)")
    parser.add_argument("--seed", type=int, default=TraceShape.seed)
    parser.add_argument("--foreign", action="store_true",
                        help="no gapscope marks: what torch.profiler records in a loop nobody marked")
    args = parser.parse_args(argv)
    count = write_synthetic_trace(args.out, TraceShape(events=args.events, seed=args.seed,
                                                       marked=not args.foreign))
    size_mb = args.out.stat().st_size / 1e6
    print(f"{args.out}: {count} events, {size_mb:.1f} MB ({size_mb * 1e6 / count:.0f} bytes/event)")


if __name__ == "__main__":
    main()
