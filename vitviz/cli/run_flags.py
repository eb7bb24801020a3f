"""The flags of every command that runs a model, declared once: ``--device``, ``--precision`` and (where the command
batches) ``--batch-size``. A command adds them with one call (:func:`add_run_flags`) and checks and resolves them
with one more (:func:`resolve_run_flags`), which gives what it prints as its first line (:meth:`RunFlags.line`:
``vitviz predict: ViT-Ti/16 on cpu, auto: bf16 (the CPU has AVX-512 BF16); ...``). ``tests/cli/test_run_flags.py``
checks that every command that builds a :class:`~vitviz.pipeline.Pipeline` has them, as declared here.

Nothing here imports torch when the module is imported (the device check does, when a command runs)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any

from vitviz.devices import (
    PRECISION_CHOICES,
    available_devices,
    available_precisions,
    normalise_device,
    resolve_precision,
    running_on,
)

RUN_FLAGS: dict[str, dict[str, Any]] = {
    "--device": {"default": "cpu", "metavar": "DEVICE", "help": "torch device: cpu, cuda, cuda:N or mps"},
    "--precision": {"choices": PRECISION_CHOICES, "default": "auto",
                    "help": "auto: bf16 where the CPU or GPU multiplies bf16 natively, else fp32; or fp32, bf16, fp16 "
                            "(fp16 on a GPU only)"},
    "--batch-size": {"type": int, "metavar": "N", "default": None, "help": "images per forward pass"},
}
"""The one table: flag -> the keywords of ``ArgumentParser.add_argument`` (each help ends with its default, added by
:func:`add_run_flags`; ``--batch-size``'s default and what a batch holds are the command's)."""

NO_BATCH = object()
"""``add_run_flags(batch_size=NO_BATCH)`` (the default): the command does not batch, no ``--batch-size``."""


def add_run_flags(p: argparse.ArgumentParser, *, batch_size: Any = NO_BATCH,
                  batch_help: str = "images per forward pass", remembered: bool = False) -> None:
    """Add ``--device``, ``--precision`` and, where the command batches, ``--batch-size`` to ``p``, from
    :data:`RUN_FLAGS`.

    Args:
        batch_size: the default batch size (an int, or None: the command chooses, ``batch_help`` says how);
            :data:`NO_BATCH` (default): no ``--batch-size``.
        batch_help: what one batch holds (and, for a None default, how the command chooses).
        remembered: the window: device and precision default to the ones it remembers (None here).
    """
    for flag, kwargs in RUN_FLAGS.items():
        kwargs = dict(kwargs)
        if flag == "--batch-size":
            if batch_size is NO_BATCH:
                continue
            kwargs.update(default=batch_size, help=batch_help)
        elif remembered:
            kwargs["default"] = None
        default = "the window's last choice" if remembered and flag != "--batch-size" else kwargs["default"]
        if default is not None:
            kwargs["help"] += f" (default: {default})"
        p.add_argument(flag, **kwargs)


@dataclass(frozen=True)
class RunFlags:
    """What :func:`resolve_run_flags` checked: the device (``cuda`` -> ``cuda:0``), the precision asked for
    (``auto`` included) and the one it resolves to, the batch size (None: the command's own choice, or no batching)."""

    command: str
    device: str
    precision_choice: str
    precision: str
    batch_size: int | None

    def line(self, model: str, *, lead: str = "", batch_words: str | None = None) -> str:
        """The command's first line: ``vitviz COMMAND: [LEAD; ]MODEL on DEVICE, auto: bf16 (why)[; batch N]``
        (:func:`vitviz.devices.running_on`, as ``vitviz export``'s).

        Args:
            lead: what comes first (e.g. how many images).
            batch_words: how the batch is said when the command chooses it (``batch_size`` None), e.g. "by the
                model's size"; nothing is said of a batch when the command does not batch.
        """
        batch = f"; batch {self.batch_size}" if self.batch_size is not None else \
            f"; batch {batch_words}" if batch_words else ""
        lead = f"{lead}; " if lead else ""
        return f"vitviz {self.command}: {lead}{running_on(model, self.device, self.precision_choice)}{batch}"

    def announce(self, model: str, **words: str | None) -> None:
        """Print :meth:`line` on stderr (where progress and errors go; stdout keeps the results)."""
        print(self.line(model, **words), file=sys.stderr, flush=True)


def resolve_run_flags(args: argparse.Namespace, command: str, *, device: str | None = None) -> RunFlags:
    """Check the run flags of ``args`` and resolve them (torch is imported to list the devices).

    Args:
        command: the sub-command (for :meth:`RunFlags.line`).
        device: the device to use instead of ``args.device`` (a launcher's, :func:`vitviz.cli.batch_flags.
            shard_and_device`).

    Raises:
        ValueError: naming the flag: a batch size below 1, a device this machine does not have, a precision the
            device does not take.
    """
    batch_size = getattr(args, "batch_size", None)
    if batch_size is not None and batch_size < 1:
        raise ValueError(f"--batch-size {batch_size}: must be at least 1")
    asked = args.device if device is None else device
    d = normalise_device(asked)
    if d not in available_devices():
        raise ValueError(f"--device {asked}: not available here (available: {', '.join(available_devices())})")
    if args.precision not in available_precisions(d):
        raise ValueError(f"--precision {args.precision}: not available on {d} (available: "
                         f"{', '.join(available_precisions(d))})")
    return RunFlags(command, d, args.precision, resolve_precision(args.precision, d), batch_size)
