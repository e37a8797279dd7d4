"""Which ops and kernels are fused, by framework and device, and what each one fused: the table, kept as data.

A fused op does in one op (one kernel, one pass over memory) the work of several. Compilers
(Inductor, XLA) fuse; so do frameworks without one: TensorFlow's graph optimizer, oneDNN's
post-ops, cuBLASLt's GEMM epilogues and cuDNN's fused convolutions. Sources of the names:
- TensorFlow grappler remapper (tensorflow/core/grappler/optimizers/remapper.cc) builds
  `_FusedConv2D`, `_FusedMatMul`, `_FusedBatchNormEx`, `_FusedDepthwiseConv2dNative`; its oneDNN
  build (mkl_layout_pass.cc, mkl_*_op.cc) renames them `_MklNativeFused*` / `_MklFused*` and adds
  `_MklNativeConv2DBackpropFilterWithBias` (filter gradient and bias gradient in one op) and
  `_MklNativePadWithFusedConv2D`. Seen on this machine: TF 2.21, Keras 3.15, seed CNN on the CPU.
- PyTorch oneDNN post-op fusions (aten/src/ATen/native/mkldnn/Conv.cpp, Linear.cpp, qconv.cpp):
  `mkldnn::_convolution_pointwise`, `mkldnn::_linear_pointwise` (`.binary` overloads),
  `onednn::qconv2d_pointwise`, `onednn::qlinear_pointwise`; Inductor's freezing calls them. Eager
  CPU torch calls none: it runs aten::mkldnn_convolution (with its bias), then aten::relu apart.
- `aten::_addmm_activation` (aten/src/ATen/native/cuda/Blas.cpp): addmm with GELU/ReLU in
  cuBLASLt's epilogue.
- cuBLASLt epilogues: `cublasLt::epilogue::impl::globalKernel` applies the epilogue (bias,
  activation) of a cuBLASLt GEMM; seen under aten::addmm of the eager MLP on an H200
  (tests/fixtures/h200). `cublasLt::splitKreduce_kernel` only sums split-K partials: not fused.
- cuDNN: kernels of its runtime-fusion engines (`cudnn_generated_*`) and implicit-GEMM
  convolution kernels whose names carry a bias or activation (`*_fprop_*_relu*`); name
  patterns, not yet seen in a gapscope run (benchmarks/gpu_checks.py counts them on a GPU).
  Fused attention kernels (cuDNN `*sdpa*`, FlashAttention `flash_fwd`/`flash_bwd`, `fmha`,
  memory-efficient attention) are listed apart from them.
- Inductor (torch/_inductor/codegen): `triton_{poi,red,per,tem}_fused_*`, `triton_<n>`,
  `triton__0d1d...` (torch 2.0), `cpp_fused_*` / `graph_<n>_cpp_fused_*` on the CPU.
- XLA: HLO fusion instructions (`fusion.3`, `loop_add_fusion`, `input_reduce_fusion`).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# Who fused: a compiler generated the kernel, or a framework or library chose a fused one.
COMPILER = "compiler"
FRAMEWORK = "framework"


@dataclass(frozen=True)
class FusedKind:
    """One row of the table: names it matches, who fused, and what it fuses."""

    pattern: re.Pattern
    framework: str        # tensorflow | torch | cuda | xla
    device: str           # cpu | gpu | any
    by: str               # COMPILER or FRAMEWORK
    anchor: str           # the op the others were fused into ("conv", "dense", ...)
    fuses: str            # what it fuses, where the name alone says it
    source: str


def _kind(pattern: str, framework: str, device: str, by: str, anchor: str, fuses: str,
          source: str) -> FusedKind:
    return FusedKind(re.compile(pattern), framework, device, by, anchor, fuses, source)


# TF op events read "<scope>/<last op>:<OpType>"; the type is matched, the scope says what was
# fused last (…/conv2d_1/Relu:_MklNativeFusedConv2D is conv + bias + ReLU).
_TF_TYPE = r"(?::|^)"
TABLE: tuple[FusedKind, ...] = (
    _kind(_TF_TYPE + r"_(?:MklNative|Mkl)?(?:PadWith)?Fused(?:Conv2D|Conv3D)\b", "tensorflow", "any",
          FRAMEWORK, "conv", "conv+bias", "grappler remapper (oneDNN: mkl_layout_pass)"),
    _kind(_TF_TYPE + r"_(?:MklNative|Mkl)?FusedDepthwiseConv2dNative\b", "tensorflow", "any",
          FRAMEWORK, "conv", "depthwise conv+bias", "grappler remapper"),
    _kind(_TF_TYPE + r"_(?:MklNative|Mkl)?FusedBatchMatMulV\d\b", "tensorflow", "any", FRAMEWORK,
          "matmul", "batch matmul+scale/add", "grappler remapper (oneDNN)"),
    _kind(_TF_TYPE + r"_(?:MklNative|Mkl)?FusedMatMul\b", "tensorflow", "any", FRAMEWORK,
          "dense", "dense+bias", "grappler remapper (oneDNN: mkl_layout_pass)"),
    _kind(_TF_TYPE + r"_(?:MklNative|Mkl)?FusedBatchNormEx\b", "tensorflow", "any", FRAMEWORK,
          "batchnorm", "batchnorm+add+activation", "grappler remapper"),
    _kind(_TF_TYPE + r"_(?:MklNative|Mkl)?Conv2DBackpropFilterWithBias\b", "tensorflow", "cpu",
          FRAMEWORK, "conv gradient", "conv filter gradient+bias gradient", "oneDNN layout pass"),
    # Any other remapper op: _Fused*/_Mkl*Fused* types (instance norm, Mish, ...).
    _kind(_TF_TYPE + r"_\w*Fused\w*\b", "tensorflow", "any", FRAMEWORK, "", "",
          "grappler remapper"),
    _kind(r"^(?:mkldnn|onednn)::\w*_pointwise", "torch", "cpu", FRAMEWORK, "", "",
          "oneDNN post-op (ATen mkldnn)"),
    _kind(r"^aten::_addmm_activation$", "torch", "any", FRAMEWORK, "dense", "dense+bias+activation",
          "cuBLASLt epilogue (ATen)"),
    _kind(r"cublasLt::epilogue::", "cuda", "gpu", FRAMEWORK, "dense", "dense+bias",
          "cuBLASLt epilogue (bias, and an activation where the GEMM call asks for one)"),
    # Fused attention: cuDNN's SDPA engines, FlashAttention, memory-efficient attention.
    _kind(r"sdpa|flash_(?:fwd|bwd)|fmha|efficient_attention", "cuda", "gpu", FRAMEWORK, "attention",
          "attention+softmax", "fused attention kernel names (cuDNN, FlashAttention, xFormers)"),
    _kind(r"_(?:fprop|dgrad|wgrad)\w*_(?:bias|relu|gelu|swish|sigmoid)", "cuda", "gpu",
          FRAMEWORK, "conv", "conv+bias+activation", "cuDNN fused kernel names"),
    _kind(r"^cudnn_generated_", "cuda", "gpu", FRAMEWORK, "", "cuDNN runtime fusion",
          "cuDNN fused kernel names"),
    # Inductor: every kernel it generates stands for a group of ops (see kernels.py's history).
    _kind(r"cpp_fused", "torch", "cpu", COMPILER, "", "", "Inductor (C++)"),
    _kind(r"^triton_|triton_\w*fused", "torch", "gpu", COMPILER, "", "", "Inductor (Triton)"),
    _kind(r"fusion", "xla", "any", COMPILER, "", "", "XLA fusion"),
)

# The last op of a TF scope names what the remapper fused on top of the anchor and its bias.
_ACTIVATIONS = {"relu6": "ReLU6", "relu": "ReLU", "leakyrelu": "LeakyReLU", "elu": "ELU",
                "gelu": "GELU", "tanh": "tanh", "sigmoid": "sigmoid", "mish": "Mish",
                "swish": "swish", "silu": "swish"}
# Generated names list ATen's ops (triton_poi_fused_addmm_relu_0): each as the part apart_part names.
_PART_WORDS = {"biasadd": "bias", "addmm": "dense", "mm": "dense", "linear": "dense", "relu": "ReLU",
               "convolution": "conv", "gelu": "GELU"}


def part(word: str) -> str:
    """A fused name's part in apart_part's words: addmm is dense, relu is ReLU."""
    return _PART_WORDS.get(word.lower(), word)


@dataclass(frozen=True)
class Fused:
    """A fused op as found: its row of the table and what it fused."""

    kind: FusedKind
    fuses: str            # "conv+bias+ReLU", "addmm+relu", or the kind's own where no name says more

    @property
    def parts(self) -> tuple[str, ...]:
        return tuple(self.fuses.split("+")) if self.fuses else ()


# Inductor's generated kernels list the ATen ops they hold, joined by "_": cpp_fused_relu_1 holds
# one, triton_poi_fused_addmm_relu_0 two. ATen ops whose own names have words joined by "_" are
# read whole (threshold_backward is one op: ReLU's gradient), longest first.
_GENERATED_OPS = re.compile(r"(?:cpp_|triton_(?:poi|red|per|tem)_)fused_(_*[a-z][a-z0-9_]*?)(?:_\d+)?$")
_ATEN_OPS = tuple(sorted((
    "threshold_backward", "native_batch_norm", "native_batch_norm_backward", "native_layer_norm",
    "native_layer_norm_backward", "max_pool2d_with_indices", "max_pool2d_with_indices_backward",
    "avg_pool2d", "avg_pool2d_backward", "adaptive_avg_pool2d", "convolution_backward",
    "nll_loss_forward", "nll_loss_backward", "_log_softmax", "_log_softmax_backward_data",
    "_softmax", "_softmax_backward_data", "embedding_dense_backward", "native_dropout",
    "native_dropout_backward", "gelu_backward", "sigmoid_backward", "tanh_backward", "silu_backward",
    "hardtanh_backward", "leaky_relu", "leaky_relu_backward", "mse_loss", "mse_loss_backward",
    "clamp_min", "clamp_max", "var_mean", "scatter_add", "index_put", "new_zeros", "zeros_like",
    "ones_like", "full_like", "_to_copy",
), key=len, reverse=True))


def generated_ops(name: str) -> list[str] | None:
    """The ATen ops a generated kernel's name lists, in order; None for a name that lists none
    (torch 2.0's triton__0d1d2d3de, an XLA fusion)."""
    found = _GENERATED_OPS.search(name)
    if found is None:
        return None
    rest, ops = found.group(1), []
    while rest:
        whole = next((op for op in _ATEN_OPS if rest == op or rest.startswith(op + "_")), None)
        word = whole or ("_" + rest.lstrip("_").split("_")[0] if rest.startswith("_")
                         else rest.split("_")[0])
        ops.append(word)
        rest = rest[len(word):]
        rest = rest[1:] if rest.startswith("_") else rest  # the "_" between two ops, not a private op's
    return ops


def one_op_kernel(name: str) -> bool:
    """A generated kernel of one op (cpp_fused_relu_1, triton_per_fused_sum_0,
    triton_poi_fused_threshold_backward_2): Inductor names every kernel it generates `fused_`,
    but a fusion needs two ops or more, so this one is a generated kernel, not a fusion (4-5 of
    a compiled CNN's 13 cpp_fused_* kernels are so)."""
    ops = generated_ops(name)
    return ops is not None and len(ops) == 1


def classify(name: str) -> Fused | None:
    """The fused kind of an op or kernel name (or an HLO op's), None if it is no fused one
    (one_op_kernel: a generated kernel of one op)."""
    if one_op_kernel(name):
        return None
    for kind in TABLE:
        if kind.pattern.search(name):
            return Fused(kind, _what(name, kind))
    return None


def is_compiler_fused(name: str) -> bool:
    found = classify(name)
    return found is not None and found.kind.by == COMPILER


def _what(name: str, kind: FusedKind) -> str:
    if kind.framework == "tensorflow" and ":" in name and kind.anchor in ("conv", "dense"):
        # …/dense_1/Relu:_MklNativeFusedMatMul: the scope's last op, without Keras' _1 suffix.
        last = re.sub(r"_\d+$", "", name.rsplit(":", 1)[0].rsplit("/", 1)[-1]).lower()
        activation = _ACTIVATIONS.get(last)
        if activation:
            return f"{kind.fuses}+{activation}"
        if last.startswith("fusedbatchnorm"):  # conv + batchnorm: the norm takes the bias's place
            return f"{kind.anchor}+batchnorm"
        if last.startswith("add"):
            return f"{kind.fuses}+add"
        return kind.fuses
    if kind.fuses:
        return kind.fuses
    # Generated names list their ops: triton_poi_fused_addmm_relu_0, cpp_fused_relu_0,
    # subtract_exponential_fusion, _convolution_pointwise.
    ops = generated_ops(name)
    if ops:
        return "+".join(op.lstrip("_") for op in ops)
    found = re.search(r"fused_(\w+?)(?:_\d+)?$", name) or re.search(r"(\w+?)_fusion", name)
    if found:
        return "+".join(p for p in found.group(1).strip("_").split("_") if p)
    op = name.rsplit("::", 1)[-1].rsplit(":", 1)[-1].lstrip("_")
    if op.endswith("_pointwise"):  # oneDNN: the primitive with its post-op
        return f"{_ONEDNN_ANCHORS.get(op[:-len('_pointwise')], op[:-len('_pointwise')])}+post-op"
    return op


_ONEDNN_ANCHORS = {"convolution": "conv", "qconv2d": "conv", "linear": "dense", "qlinear": "dense",
                   "convolution_transpose": "transposed conv"}


def compiled_graph() -> Fused:
    """A compiled Inductor graph whose kernels were not recorded one by one: fused, by a compiler."""
    return Fused(next(k for k in TABLE if k.source == "Inductor (C++)"), "compiled graph")


# Unfused ops that do one part of what a fused op does, by the part (torch and TF op names):
# what a run without the fusion runs apart. torch's convolution and addmm take their bias
# inside the op, so they stand for conv and dense; the activation runs apart.
_APART = (
    ("conv", re.compile(r"^aten::(?:mkldnn_|cudnn_|_)?convolution$|^aten::conv\dd$|:(?:_MklNative|_Mkl)?Conv[23]D$")),
    ("dense", re.compile(r"^aten::(?:addmm|mm|matmul|linear)$|:(?:_MklNative|_Mkl)?MatMul$")),
    ("bias", re.compile(r":BiasAdd$")),
    ("add", re.compile(r"^aten::add_?$|:AddV2$")),
    ("ReLU", re.compile(r"^aten::(?:relu_?|clamp_min_?)$|:Relu$")),
    ("batchnorm", re.compile(r"^aten::(?:native_batch_norm|_batch_norm_impl_index)$|:FusedBatchNorm(?:V\d)?$")),
    ("GELU", re.compile(r"^aten::gelu_?$|:Gelu$")),
    ("sigmoid", re.compile(r"^aten::sigmoid_?$|:Sigmoid$")),
    ("tanh", re.compile(r"^aten::tanh_?$|:Tanh$")),
)


def apart_part(name: str) -> str | None:
    """The part ("conv", "ReLU", ...) an unfused op does, where a fused op could do it too."""
    return next((part for part, pattern in _APART if pattern.search(name)), None)
