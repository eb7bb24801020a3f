"""The flags ``vitviz export`` and ``vitviz stats`` share (inputs, model, output folder, batch size, device,
precision, overwrite, quiet) and the check of the device, precision and batch size they name."""

from __future__ import annotations

import argparse

from vitviz.devices import available_devices, available_precisions, normalise_device


def add_batch_arguments(p: argparse.ArgumentParser, out_help: str,
                        overwrite_help: str = "replace existing output files") -> None:
    """The flags ``vitviz export`` and ``vitviz stats`` share: inputs, model, output folder, batch size, device,
    precision, overwrite, quiet."""
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="image files, folders (searched recursively), glob patterns ('**' recurses) or text files "
                        "listing paths (.txt/.lst/.list, or @FILE)")
    p.add_argument("--model", "-m", required=True, metavar="M",
                   help="checkpoint file or folder, a pretrained name, 'demo' or random:ARCH")
    p.add_argument("--out", "-o", required=True, metavar="DIR", help=out_help)
    p.add_argument("--batch-size", type=int, default=16, help="images per forward pass (default 16)")
    p.add_argument("--device", default="cpu", help="torch device (default cpu)")
    p.add_argument("--precision", choices=("auto", "fp32", "bf16", "fp16"), default="auto",
                   help="auto (default): bf16 where the CPU or GPU multiplies bf16 natively, else fp32")
    p.add_argument("--overwrite", action="store_true", help=overwrite_help)
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar (for logs)")


def check_device(device: str, precision: str, batch_size: int) -> str:
    """The device (``cuda`` -> ``cuda:0``) when it exists here and takes ``precision``, and a batch size of at least
    one (ValueError naming the flag otherwise)."""
    if batch_size < 1:
        raise ValueError(f"--batch-size {batch_size}: must be at least 1")
    d = normalise_device(device)
    if d not in available_devices():
        raise ValueError(f"--device {device}: not available here (available: {', '.join(available_devices())})")
    if precision not in available_precisions(d):
        raise ValueError(f"--precision {precision}: not available on {d} (available: "
                         f"{', '.join(available_precisions(d))})")
    return d
