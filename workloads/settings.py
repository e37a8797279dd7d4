"""Settings of one run: everything that decides what is executed and measured, kept in the manifest."""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields, replace

from gapscope.profilers.errors import GapscopeInputError

# Far beyond any useful run, small enough that no count overflows a C integer on the way.
MAX_STEPS = 10**7
MAX_EPOCHS = 10**4
# Size overrides: a batch beyond this or a model 64x wider is a typo, not a measurement here.
MAX_BATCH = 65_536
MIN_WIDTH, MAX_WIDTH = 0.01, 64.0
# Processes per node and nodes of a distributed run: more than this on one job is a typo here.
MAX_NPROC, MAX_NNODES = 256, 1024
# The distributed settings at their one-process values stay out of to_dict, so a one-process
# run's manifest is what it was before they existed.
_DISTRIBUTED_DEFAULTS = {"nproc": 1, "nnodes": 1, "node_rank": 0, "rdzv_endpoint": None,
                         "job_id": None}
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


@dataclass(frozen=True)
class RunSettings:
    workload: str
    framework: str                      # torch | keras | keras-torch | keras-jax | tf
    variant: str = "default"            # comma-separated variant names (workloads.variants)
    steps: int = 60                     # steps in the run (ignored when epochs is set)
    epochs: int | None = None           # whole passes over the data set instead of a step count
    warmup_steps: int = 5
    trace: bool = True
    trace_steps: int = 10
    device: str = "auto"                # auto | cpu | cuda
    data_path: str | None = None        # a real MNIST (mnist.npz or IDX files) the user has
    sample_resources: bool = True       # CPU load (psutil) and NVML GPU figures in a background thread
    batch_size: int | None = None       # samples per step; None: the workload's own
    width: float | None = None          # hidden layer widths times this (MLP, dense, LSTM units); None: as registered
    # Set by the variants (workloads.variants.resolve), never by hand:
    compile_mode: str | None = None     # torch.compile mode
    compile_backend: str | None = None  # torch.compile backend other than inductor
    dynamo_cache_limit: int | None = None
    torchscript: bool = False           # torch.jit.script, else torch.jit.trace (workloads.runners.torchscript)
    matmul_precision: str | None = None
    amp_dtype: str | None = None        # float16 | bfloat16
    grad_scaler: bool = False
    drop_last: bool = False
    jit_compile: bool | str = False     # keras: True | False | "auto"
    steps_per_execution: int = 1
    mixed_precision: str | None = None  # keras dtype policy
    tf_mode: str = "function"           # raw TF loop: eager | function | xla
    pipeline: str | None = None         # input pipeline; None: the framework's usual one
    num_workers: int = 0
    pageable: bool = False              # GPU: DataLoader batches not pinned (the pageable variant)
    inference: bool = False
    malloc_keep: bool = False           # glibc keeps what it frees (workloads.runners.malloc_keep)
    # Distributed (torch: torchrun): processes on this node, nodes, this node's rank, the
    # rendezvous host:port, and the job id every node names the shared job directory with.
    nproc: int = 1
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str | None = None
    job_id: str | None = None

    def to_dict(self) -> dict:
        data = asdict(self)
        for key, default in _DISTRIBUTED_DEFAULTS.items():
            if data[key] == default:
                del data[key]
        return data

    @property
    def distributed(self) -> bool:
        """Several processes (on one node or several): a job directory with one run per rank."""
        return self.nproc > 1 or self.nnodes > 1

    @property
    def world_size(self) -> int:
        return self.nproc * self.nnodes

    @classmethod
    def from_dict(cls, data: dict) -> "RunSettings":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def check_lengths(self) -> None:
        """Refuses step counts that contradict each other, before anything runs: a warm-up as
        long as the run leaves no steady step, and a trace window longer than the steps after
        the warm-up would have to be cut short (it lies after the warm-up: right after it, or at
        the end for PyTorch runs).
        Also the DataLoader worker count, bounded to the machine: a huge one forks until the
        machine gives out."""
        from gapscope.workloads.variants import max_workers
        _check_int("DataLoader workers (nw<N>)", self.num_workers, 0, max_workers())
        self.check_distributed()
        _check_int("steps", self.steps, 2, MAX_STEPS)
        _check_int("warmup steps", self.warmup_steps, 0, MAX_STEPS)
        _check_int("trace steps", self.trace_steps, 1, MAX_STEPS)
        if self.batch_size is not None:
            _check_int("batch size", self.batch_size, 1, MAX_BATCH)
        if self.width is not None and not (isinstance(self.width, (int, float))
                                           and MIN_WIDTH <= self.width <= MAX_WIDTH):
            raise GapscopeInputError(f"width {self.width!r}: a multiplier from {MIN_WIDTH} to {MAX_WIDTH}")
        if self.epochs is not None:
            _check_int("epochs", self.epochs, 1, MAX_EPOCHS)
            return  # the step count follows from the data set: the runner checks the rest
        if self.warmup_steps >= self.steps:
            raise GapscopeInputError(f"--warmup {self.warmup_steps} leaves none of the "
                                     f"{self.steps} steps to measure: use fewer warm-up steps")
        self._check_steady_call()
        first = max(1, self.warmup_steps)
        if self.trace and first + self.trace_steps > self.steps:
            raise GapscopeInputError(
                f"--trace-steps {self.trace_steps} after {first} warm-up step(s) needs "
                f"--steps {first + self.trace_steps} or more, got {self.steps}")

    def _check_steady_call(self) -> None:
        """With steps_per_execution N one Keras call runs N updates, and the call that holds the
        warm-up compiles: all of it is warm-up (analysis.model.run rounds it up so). A step run is one
        epoch of exactly --steps updates, so a steady update needs a call after that one."""
        spe = self.steps_per_execution
        if not isinstance(spe, int) or spe <= 1 or self.warmup_steps == 0:
            return
        from gapscope.profilers.executions import warmup_updates
        if self.steps > warmup_updates(self.warmup_steps, spe, self.steps, self.steps):
            return
        needed = warmup_updates(self.warmup_steps, spe, MAX_STEPS + spe, MAX_STEPS + spe) + 1
        raise GapscopeInputError(
            f"--steps {self.steps} with steps_per_execution {spe}: a Keras call runs {spe} "
            f"updates and the call holding the warm-up compiles, so every step is warm-up; "
            f"needs --steps {needed} or more")

    def check_distributed(self) -> None:
        """--nproc, --nnodes, --node-rank, --rdzv-endpoint and --job-id agree with each other."""
        _check_int("--nproc", self.nproc, 1, MAX_NPROC)
        _check_int("--nnodes", self.nnodes, 1, MAX_NNODES)
        _check_int("--node-rank", self.node_rank, 0, self.nnodes - 1)
        if self.rdzv_endpoint is not None:
            split_endpoint(self.rdzv_endpoint)
        if self.job_id is not None and not _JOB_ID.fullmatch(str(self.job_id)):
            raise GapscopeInputError(f"--job-id {self.job_id!r}: up to 64 letters, digits, '.', '_' "
                                     "or '-', starting with a letter or digit")
        if self.nnodes > 1 and (self.rdzv_endpoint is None or self.job_id is None):
            raise GapscopeInputError(
                f"--nnodes {self.nnodes} needs --rdzv-endpoint HOST:PORT (node 0's address) and "
                "--job-id NAME, the same on every node: the nodes meet there and write one job "
                "directory named after it")
        if self.distributed and self.torchscript:
            raise GapscopeInputError("the torchscript variant does not run distributed: "
                                     "DistributedDataParallel wraps the eager model")

    def with_variant(self, cuda_available: bool) -> "RunSettings":
        """These settings with the variant combination resolved (or refused) for this machine,
        and their step counts checked."""
        from gapscope.profilers.errors import UnsupportedVariantError
        from gapscope.workloads.variants import resolve
        self.check_lengths()
        if self.device == "cuda" and not cuda_available:  # before a run directory exists
            raise UnsupportedVariantError("--device cuda: this machine has no CUDA GPU "
                                          "(use --device cpu, or auto)")
        canonical, options = resolve(self.framework, self.variant, cuda_available)
        resolved = replace(self, variant=canonical, **options)
        resolved.check_lengths()
        return resolved


def split_endpoint(endpoint: str) -> tuple[str, int]:
    """(host, port) of a rendezvous endpoint `HOST:PORT`; one line when it is not one."""
    host, _, port = str(endpoint).rpartition(":")
    if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise GapscopeInputError(f"--rdzv-endpoint {endpoint!r}: expected HOST:PORT, "
                                 "e.g. node0.example.com:29500")
    return host.strip("[]"), int(port)


def _check_int(what: str, value, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise GapscopeInputError(f"{what} must be a whole number from {low} to {high:,}, got {value!r}")
