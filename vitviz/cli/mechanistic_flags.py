"""What ``vitviz lens``, ``vitviz ablate`` and ``vitviz patch`` share: the model, device, precision and load flags,
``--target`` / ``--text``, ``--csv F`` (refused when it exists, unless ``--overwrite``), opening the model on its
device, reading an image into the model's input, and the table they print or write. Nothing here imports torch when
the module is imported."""

from __future__ import annotations

import argparse
import csv
import io
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from vitviz.cli.run_flags import add_run_flags, resolve_run_flags
from vitviz.cli.shared import add_debug, add_load_options, add_text_options, check_templates, load

TARGET_HELP = ("what is scored: top (default: the clean image's top class), a class index or name, similar:IMAGE, "
               "similar:IMAGE@ROW,COL or similar:VECTOR.npy (a feature model's similarity)")


def add_common(p: argparse.ArgumentParser, *, target: bool = True) -> None:
    """The flags every mechanistic command takes (after its positional arguments)."""
    if target:
        p.add_argument("--target", default="top", help=TARGET_HELP)
    p.add_argument("--csv", metavar="F", help="write the table to this CSV file instead of printing it")
    p.add_argument("--overwrite", action="store_true", help="replace the --csv file when it exists")
    add_run_flags(p)
    add_text_options(p, "the prompts are the classes (CLIP: softmax over them; SigLIP: the sigmoid of each)")
    add_load_options(p)
    add_debug(p)


def prepare(args: argparse.Namespace) -> tuple[Any, Any]:
    """``(pipeline, target)``: the flags checked before any work (device, precision, CSV path, prompts), the model
    opened on its device and precision, the target read (None: the top class).

    Raises:
        ValueError / OSError: one line naming the flag or file and the cause.
    """
    from vitviz.batch.target_flags import read_prompts, read_target, text_problem
    from vitviz.evaluate.report import check_writable

    flags = resolve_run_flags(args, args.command)
    check_templates(args)
    if args.csv:
        check_writable(args.csv, overwrite=args.overwrite)
    target_text = getattr(args, "target", "top")
    prompts = None
    if args.text is not None:
        prompts, problem = text_problem(args.text, args.model, target_text)
        if problem:
            raise ValueError(problem)
    from vitviz.pipeline import Pipeline  # torch: when the command runs

    pipeline = Pipeline(load(args, args.model), device=flags.device, precision=flags.precision_choice)
    pipeline.source = args.model
    if prompts is not None:
        pipeline = read_prompts(pipeline, prompts, args.templates, target=target_text)
    return pipeline, read_target(pipeline, target_text)


def read_inputs(args: argparse.Namespace, pipeline: Any, *paths: str) -> list[Any]:
    """The image files ``paths`` as the model's inputs ``[1, C, H, W]`` (ImageError naming the file); once they are
    read, the command's first line (:meth:`vitviz.cli.run_flags.RunFlags.announce`: the model, device and the precision
    resolved)."""
    from vitviz.imaging import ImageError, load_image

    inputs = []
    for path in paths:
        image = load_image(path)
        try:
            inputs.append(pipeline.prepare(image).x[None])
        except ImageError as e:
            raise ImageError(path, e.problem) from None
    resolve_run_flags(args, args.command).announce(pipeline.model.spec.name)
    return inputs


def emit(args: argparse.Namespace, header: Sequence[str], rows: Sequence[Sequence[Any]], summary: str) -> None:
    """The table as CSV: to ``--csv`` (atomically; ``summary`` and the file's name on stderr) or to stdout."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    for row in rows:
        w.writerow([f"{v:.6g}" if isinstance(v, float) else v for v in row])
    if not args.csv:
        sys.stdout.write(buf.getvalue())
        sys.stdout.flush()
        print(summary, file=sys.stderr, flush=True)
        return
    from vitviz.imaging import write_atomic

    target = Path(args.csv)
    data = buf.getvalue().encode("utf-8")
    write_atomic(target, lambda fh: fh.write(data), overwrite=args.overwrite, suffix=".tmp",
                 exists_message=f"{target} already exists (pass --overwrite to replace it)")
    print(f"{summary}; wrote {target} ({len(rows)} rows)", file=sys.stderr, flush=True)
