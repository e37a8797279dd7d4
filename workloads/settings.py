"""Settings of one run: everything that decides what is executed and measured, kept in the manifest."""
from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class RunSettings:
    workload: str
    framework: str
    variant: str = "default"
    steps: int = 60
    warmup_steps: int = 5
    trace: bool = True
    trace_steps: int = 20
    device: str = "auto"           # "auto", "cpu" or "cuda"
    jit_compile: bool = False      # keras: XLA; default off so the baseline matches the blog's "plain" rows
    steps_per_execution: int = 1   # keras

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> "RunSettings":
        return cls(**data)
