"""Devices and precisions, without importing torch until it is needed.

The window shows before torch is imported (``import torch`` is ~2 s of a ~3 s start): it lists the CPU only until
torch is loaded (by the first model load, on the worker), then asks again.

Precision ``"auto"`` (the window's default and ``vitviz export --precision auto``) is bf16 where the hardware
multiplies bf16 natively and fp32 elsewhere (:func:`resolve_precision`): on an x86 CPU with AVX-512 BF16 or AMX,
an Arm CPU with the BF16 extension, or a CUDA GPU that supports it (compute capability 8.0 and later). Without
native support, bf16 matmuls are emulated and slower than fp32. On this project's CPU (AVX-512 BF16) the window's
whole per-image pipeline for ViT-B/16 took 0.18 s in bf16 against 0.59 s in fp32, with maps that rank the patches
as in fp32 (docs/benchmarks.md, "bf16 where the CPU has it").
"""

from __future__ import annotations

import functools
import os
import platform
import subprocess
import sys

PRECISIONS = ("fp32", "bf16", "fp16")
PRECISION_CHOICES = ("auto",) + PRECISIONS
# /proc/cpuinfo flags of x86 CPUs that multiply bf16 in hardware (AVX-512 BF16: Cooper Lake, Sapphire Rapids, Zen 4
# and later; AMX-BF16: Sapphire Rapids and later), and the Arm feature (Armv8.6 BF16: Graviton 3, Neoverse V1 ...)
_X86_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
_ARM_BF16_FEATURES = frozenset({"bf16"})


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
    """auto, fp32 and bf16 everywhere; fp16 only on a GPU (CPU half matmuls are slow or missing)."""
    return ["auto", "fp32", "bf16"] + (["fp16"] if not device.startswith("cpu") else [])


def precision_label(precision: str, device: str = "cpu") -> str:
    """How a menu or the status bar names a precision: ``"auto (bf16)"`` says what auto chose. Never imports torch:
    before torch is loaded a GPU's choice is not known yet and ``"auto"`` is shown as such."""
    if precision != "auto":
        return precision
    if normalise_device(device).startswith("cpu") or torch_loaded():
        try:
            return f"auto ({resolve_precision('auto', device)})"
        except Exception:  # noqa: BLE001 - a device torch does not know: say no more than "auto"
            return "auto"
    return "auto"


def cpu_flags(cpuinfo: str | None = None) -> frozenset[str]:
    """The CPU's feature flags as Linux lists them in ``/proc/cpuinfo`` (x86 ``flags``, Arm ``Features``); empty
    where there is no such file (macOS, Windows) or it cannot be read.

    Args:
        cpuinfo: the file's text (for tests); default: read ``/proc/cpuinfo``.
    """
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
                cpuinfo = f.read()
        except OSError:
            return frozenset()
    flags: set[str] = set()
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() in ("flags", "features"):
            flags.update(value.split())
    return frozenset(flags)


def _macos_arm_bf16() -> bool:
    """Apple silicon with FEAT_BF16 (M2 and later), as ``sysctl hw.optional.arm.FEAT_BF16`` says."""
    try:
        out = subprocess.run(["sysctl", "-n", "hw.optional.arm.FEAT_BF16"], capture_output=True, text=True,
                             timeout=2, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    return out.strip() == "1"


def _torch_cpu_bf16() -> bool | None:
    """What torch itself says (``torch.cpu._is_avx512_bf16_supported`` / ``_is_amx_tile_supported``, private but
    stable since torch 2.1), or None when this torch does not say. Only asked once torch is imported."""
    if not torch_loaded():
        return None
    import torch

    probes = [getattr(torch.cpu, n, None) for n in ("_is_avx512_bf16_supported", "_is_amx_tile_supported")]
    probes = [p for p in probes if callable(p)]
    if not probes:
        return None
    try:
        return any(bool(p()) for p in probes)
    except Exception:  # noqa: BLE001 - a probe that fails says nothing
        return None


@functools.lru_cache(maxsize=1)
def cpu_has_native_bf16() -> bool:
    """Whether this CPU multiplies bf16 in hardware: the Linux flags ``avx512_bf16`` / ``amx_bf16`` (x86) or ``bf16``
    (Arm); on macOS the ``FEAT_BF16`` sysctl; elsewhere torch's own probe. ``VITVIZ_CPU_BF16=0/1`` overrides it."""
    forced = os.environ.get("VITVIZ_CPU_BF16", "").strip()
    if forced in ("0", "1"):
        return forced == "1"
    flags = cpu_flags()
    if flags:
        return bool(flags & (_X86_BF16_FLAGS | _ARM_BF16_FEATURES))
    if sys.platform == "darwin" and platform.machine() == "arm64":
        return _macos_arm_bf16()
    return bool(_torch_cpu_bf16())


def gpu_has_native_bf16(device: str) -> bool:
    """Whether a CUDA device computes in bf16 natively (``torch.cuda.is_bf16_supported``: compute capability 8.0
    and later); False for other devices (MPS's bf16 support depends on the macOS version: fp32 there)."""
    if not device.startswith("cuda"):
        return False
    import torch

    if not torch.cuda.is_available():
        return False
    idx = int(device.split(":")[1]) if ":" in device else 0
    try:
        major, _minor = torch.cuda.get_device_capability(idx)
    except Exception:  # noqa: BLE001 - no such device: fp32
        return False
    return major >= 8


def resolve_precision(precision: str, device: str = "cpu") -> str:
    """The precision to run in: ``precision`` itself, or for ``"auto"`` bf16 where ``device`` multiplies bf16
    natively (:func:`cpu_has_native_bf16`, :func:`gpu_has_native_bf16`) and fp32 elsewhere.

    Raises:
        ValueError: an unknown precision (naming the valid ones).
    """
    if precision not in PRECISION_CHOICES:
        raise ValueError(f"precision must be one of {', '.join(PRECISION_CHOICES)}, got {precision!r}")
    if precision != "auto":
        return precision
    device = normalise_device(device)
    if device.startswith("cpu"):
        return "bf16" if cpu_has_native_bf16() else "fp32"
    return "bf16" if gpu_has_native_bf16(device) else "fp32"


def precision_reason(precision: str, device: str = "cpu") -> str:
    """Why :func:`resolve_precision` chose what it chose, e.g. ``"auto: bf16 (the CPU has AVX-512 BF16)"``."""
    chosen = resolve_precision(precision, device)
    if precision != "auto":
        return chosen
    device = normalise_device(device)
    if device.startswith("cpu"):
        flags = cpu_flags()
        have = [n for n, f in (("AVX-512 BF16", "avx512_bf16"), ("AMX-BF16", "amx_bf16"), ("BF16", "bf16"))
                if f in flags]
        why = (f"the CPU has {' and '.join(have)}" if chosen == "bf16" and have else
               "the CPU multiplies bf16 natively" if chosen == "bf16" else
               "the CPU has no native bf16 matmul")
    else:
        why = f"{device} {'supports' if chosen == 'bf16' else 'has no native'} bf16"
    return f"auto: {chosen} ({why})"


def running_on(model: str, device: str, precision: str) -> str:
    """What a command says it runs, in its first line: ``"ViT-Ti/16 on cpu, auto: bf16 (the CPU has AVX-512 BF16)"``
    (``precision`` as asked for, ``auto`` included: :func:`precision_reason`)."""
    return f"{model} on {device}, {precision_reason(precision, device)}"


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

