"""Known GPUs' dense peak FLOP/s by dtype, from NVIDIA's datasheets, so that a layer's GFLOP/s on
a GPU reads as a share of what the device can do; an unknown device gets no share, never a guess."""
from __future__ import annotations

from dataclasses import dataclass

SOURCE = "NVIDIA datasheets (dense, without sparsity; boost clock)"


@dataclass(frozen=True)
class DevicePeak:
    match: tuple[str, ...]   # every one of these is in the device's name
    product: str
    fp32: float              # TFLOP/s on CUDA cores: fp32 GEMMs that do not use TF32
    tf32: float | None       # TFLOP/s on tensor cores
    bf16: float | None


# Most specific first: "H100 PCIe" before "H100", "A100" before "A10", "L40S" before "L4".
PEAKS = (
    DevicePeak(("H200",), "H200 SXM", 67.0, 494.7, 989.4),
    DevicePeak(("H100", "PCIe"), "H100 PCIe", 51.2, 378.0, 756.0),
    DevicePeak(("H100",), "H100 SXM", 67.0, 494.7, 989.4),
    DevicePeak(("A100",), "A100", 19.5, 156.0, 312.0),
    DevicePeak(("L40S",), "L40S", 91.6, 183.0, 362.0),
    DevicePeak(("L4",), "L4", 30.3, 60.0, 121.0),
    DevicePeak(("A10",), "A10", 31.2, 62.5, 125.0),
    DevicePeak(("V100",), "V100 SXM2", 15.7, None, 125.0),   # its tensor cores do fp16, not bf16
    DevicePeak(("T4",), "T4", 8.1, None, 65.0),
)


def device_peak(device: str | None) -> DevicePeak | None:
    """The table's row for a device name ("NVIDIA H100 80GB HBM3"), None where none matches."""
    if not device:
        return None
    words = device.replace("-", " ").split()
    if "NVL" in words:  # the NVL cards run lower clocks than their SXM namesakes: not in the table
        return None
    for peak in PEAKS:
        if all(any(w == m or w.startswith(m) and not w[len(m):].isalpha() for w in words)
               for m in peak.match):
            return peak
    return None


def peak_gflops(device: str | None, dtype: str = "fp32") -> dict | None:
    """{"gflops", "method"} of the device's peak for the dtype, the form a CPU's measured peak
    has; None for a device the table does not know."""
    peak = device_peak(device)
    tflops = getattr(peak, dtype, None) if peak else None
    if tflops is None:
        return None
    return {"gflops": tflops * 1000.0,
            "method": f"{peak.product} {dtype} peak, {tflops:g} TFLOP/s ({SOURCE})"}
