"""The flags ``vitviz export`` and ``vitviz stats`` share (inputs, model, output folder, batch size, device,
precision, overwrite, quiet, reading threads) and the check of the device, precision and batch size they name; the
gradient pass's memory mode (``--backward``, export and evaluate); the shard of the three batch commands
(``--shard K/N``, else the launcher's: :mod:`vitviz.batch.launcher`)."""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence

from vitviz.batch.inputs import parse_shard
from vitviz.batch.launcher import launch_from_env
from vitviz.devices import available_devices, available_precisions, normalise_device

SHARD_HELP = ("do shard K of N (a deterministic 1/N of the images; each shard writes its own part, 'vitviz merge' "
              "joins them). Default: from torchrun (RANK, WORLD_SIZE; device cuda -> cuda:LOCAL_RANK) or a SLURM "
              "job array (SLURM_ARRAY_TASK_ID, SLURM_ARRAY_TASK_COUNT) or srun (SLURM_PROCID, SLURM_NTASKS), else "
              "all images")


def add_batch_arguments(p: argparse.ArgumentParser, out_help: str,
                        overwrite_help: str = "replace existing output files") -> None:
    """The flags ``vitviz export`` and ``vitviz stats`` share: inputs, model, output folder, batch size, device,
    precision, overwrite, quiet, reading threads."""
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help="image files, folders (searched recursively), glob patterns ('**' recurses) or text files "
                        "listing paths (.txt/.lst/.list, or @FILE)")
    p.add_argument("--model", "-m", required=True, metavar="M",
                   help="checkpoint file or folder, a pretrained name, 'demo' or random:ARCH")
    p.add_argument("--out", "-o", required=True, metavar="DIR", help=out_help)
    p.add_argument("--batch-size", type=int, default=16, help="images per forward pass (default 16)")
    add_device_arguments(p)
    p.add_argument("--overwrite", action="store_true", help=overwrite_help)
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar (for logs)")
    p.add_argument("--workers", type=int, metavar="N",
                   help="threads that read and preprocess the images while the model runs (default: by the device: "
                        "vitviz.batch.inputs.default_workers)")


def add_device_arguments(p: argparse.ArgumentParser) -> None:
    """``--device`` and ``--precision`` (the batch commands', and the single-image ``lens``, ``ablate``, ``patch``);
    :func:`check_device` checks them."""
    p.add_argument("--device", default="cpu", help="torch device (default cpu)")
    p.add_argument("--precision", choices=("auto", "fp32", "bf16", "fp16"), default="auto",
                   help="auto (default): bf16 where the CPU or GPU multiplies bf16 natively, else fp32")


BACKWARD: dict[str, bool | None] = {"auto": None, "keep": True, "recompute": False}
"""``--backward``'s words -> ``keep_graph`` of :func:`vitviz.document.streamed.stream_images`."""


def add_backward_argument(p: argparse.ArgumentParser) -> None:
    """``--backward auto|keep|recompute``: how a streamed backward treats the blocks' graphs."""
    p.add_argument("--backward", choices=tuple(BACKWARD), default="auto",
                   help="how the gradient pass treats each block's graph: keep (every block's graph from the "
                        "forward: fastest, memory grows with depth), recompute (each block again at its backward "
                        "step: memory of about one layer, about one more forward of time), auto (default: keep when "
                        "it fits in half the memory available)")


def check_workers(workers: int | None) -> int | None:
    """``--workers``: None (the default) or at least 1 (ValueError naming the flag otherwise)."""
    if workers is not None and workers < 1:
        raise ValueError(f"--workers {workers}: must be at least 1 (threads that read the images)")
    return workers


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


def add_shard_argument(p: argparse.ArgumentParser) -> None:
    """``--shard K/N``."""
    p.add_argument("--shard", metavar="K/N", help=SHARD_HELP)


def join_signed(argv: Sequence[str], flags: Sequence[str]) -> list[str]:
    """``argv`` with a value of one of ``flags`` that starts with a minus sign and a digit joined to its flag
    (``--shard -1/2`` -> ``--shard=-1/2``): argparse would take it for a flag and say "expected one argument" instead
    of what is wrong with the value."""
    out: list[str] = []
    i = 0
    argv = list(argv)
    while i < len(argv):
        a = argv[i]
        if "--" in out:  # after "--" everything is an input
            out.append(a)
        elif a in flags and i + 1 < len(argv) and re.match(r"-[0-9.]", argv[i + 1]):
            out.append(f"{a}={argv[i + 1]}")
            i += 1
        else:
            out.append(a)
        i += 1
    return out


def shard_and_device(shard: str | None, device: str, command: str
                     ) -> tuple[tuple[int, int], str, str, str | None]:
    """``(shard, device, origin, line)`` of a batch command: ``--shard K/N`` when given; else the launcher's
    (torchrun, a SLURM array, srun: :func:`vitviz.batch.launcher.launch_from_env`); else ``(1, 1)``, all images.
    ``line`` says where a launcher's shard came from (None otherwise, and for a launcher's single process): the
    command prints it (:func:`announce`) as its first line once its arguments are checked, so that a refusal stays
    one line.

    Raises:
        ValueError: ``--shard`` is not K/N, or a launcher's variable is not what it sets (naming the variable).
    """
    if shard:
        return parse_shard(shard), device, "--shard", None
    launch = launch_from_env(device)
    if launch is None:
        return (1, 1), device, "", None
    line = f"vitviz {command}: {launch.line()}" if launch.shard[1] > 1 else None
    return launch.shard, launch.device, launch.origin, line


def announce(line: str | None) -> None:
    """Print the launcher's line of :func:`shard_and_device` (stderr), if any."""
    if line:
        print(line, file=sys.stderr, flush=True)
