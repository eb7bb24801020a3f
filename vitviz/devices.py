"""Devices and precisions, without importing torch until it is needed.

The window shows before torch is imported (``import torch`` is ~2 s of a ~3 s start): it lists the CPU only until
torch is loaded (by the first model load, on the worker), then asks again.
"""

from __future__ import annotations

import sys

PRECISIONS = ("fp32", "bf16", "fp16")


def torch_loaded() -> bool:
    return "torch" in sys.modules


def available_devices(*, probe: bool = True) -> list[str]:
    """``["cpu", "cuda:0", ..., "mps"]`` for what this machine has.

    Args:
        probe: import torch to look (default). With False and torch not imported yet: ``["cpu"]``.
    """
    if not probe and not torch_loaded():
        return ["cpu"]
    import torch

    devices = ["cpu"]
    if torch.cuda.is_available():
        devices += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        devices.append("mps")
    return devices


def normalise_device(device: str) -> str:
    """"cuda" -> "cuda:0"; other names unchanged."""
    return "cuda:0" if device == "cuda" else device


def available_precisions(device: str) -> list[str]:
    """fp32 and bf16 everywhere; fp16 only on a GPU (CPU half matmuls are slow or missing)."""
    return ["fp32", "bf16"] + (["fp16"] if not device.startswith("cpu") else [])


def device_description(device: str) -> str:
    """A human-readable name of ``device`` (the GPU's model name for CUDA, once torch is loaded)."""
    if device.startswith("cuda") and torch_loaded():
        import torch

        if torch.cuda.is_available():
            idx = int(device.split(":")[1]) if ":" in device else 0
            return f"{device} ({torch.cuda.get_device_name(idx)})"
    if device == "mps":
        return "mps (Apple GPU)"
    return device

