"""Settings of one run: everything that decides what is executed and measured, kept in the manifest."""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields, replace


@dataclass(frozen=True)
class RunSettings:
    workload: str
    framework: str                      # torch | keras | keras-torch | tf
    variant: str = "default"            # comma-separated variant names (workloads.variants)
    steps: int = 60                     # steps in the run (ignored when epochs is set)
    epochs: int | None = None           # whole passes over the data set instead of a step count
    warmup_steps: int = 5
    trace: bool = True
    trace_steps: int = 10
    device: str = "auto"                # auto | cpu | cuda
    data_path: str | None = None        # a real MNIST (mnist.npz or IDX files) the user has
    sample_resources: bool = True       # CPU load (psutil) and NVML GPU figures in a background thread
    # Set by the variants (workloads.variants.resolve), never by hand:
    compile_mode: str | None = None     # torch.compile mode
    compile_backend: str | None = None  # torch.compile backend other than inductor
    dynamo_cache_limit: int | None = None
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
    inference: bool = False

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "RunSettings":
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})

    def with_variant(self, cuda_available: bool) -> "RunSettings":
        """These settings with the variant combination resolved (or refused) for this machine."""
        from workloads.variants import resolve
        canonical, options = resolve(self.framework, self.variant, cuda_available)
        return replace(self, variant=canonical, **options)
