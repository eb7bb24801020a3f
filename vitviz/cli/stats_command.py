"""``vitviz stats --model M INPUT ... --out DIR``: attention distance and entropy per layer and head and the
artefact frequency over the images, as CSV files and a figure (:mod:`vitviz.batch.stats`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vitviz.batch.failures import FAILED_BASE, MAX_FAILED_STATUS
from vitviz.batch.inputs import inputs_for_cli
from vitviz.batch.stats import ARTEFACT_CSV, FIGURE, STATS_CSV, compute_stats
from vitviz.batch.stats_files import check_outputs, write_outputs
from vitviz.cli.batch_flags import add_batch_arguments, check_device
from vitviz.cli.commands import summary
from vitviz.cli.shared import Reporter, add_debug, add_load_options, load
from vitviz.devices import precision_reason


def add_parser(sub) -> None:
    st = sub.add_parser(
        "stats", help=summary("stats"),
        description="Mean attention distance and entropy per layer and head (mean and standard deviation over the "
                    "images; the ViT paper's Fig. 7 right) and how often each patch position holds a high-norm "
                    "token; writes CSV files and a figure (PNG, SVG).")
    add_batch_arguments(st, f"output folder for {STATS_CSV}, {ARTEFACT_CSV} and {FIGURE}.png/.svg")
    add_load_options(st)
    add_debug(st)


def run(args: argparse.Namespace, report: Reporter) -> int:
    """``vitviz stats``: returns the exit status (0; 2: could not run or no image could be read; 64 + n: n images
    failed; 130: interrupted, nothing written)."""
    from vitviz.pipeline import Pipeline  # torch: when the command runs, not for its --help

    device = check_device(args.device, args.precision, args.batch_size)
    out = Path(args.out)
    check_outputs(out, overwrite=args.overwrite)  # where the results go, before minutes of work
    images, status = inputs_for_cli(args.inputs, report)
    if not images:
        return 2
    model = load(args, args.model)
    pipeline = Pipeline(model, device=device, precision=args.precision)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    log(f"vitviz stats: {len(images)} image(s); {getattr(pipeline.spec, 'name', 'model')} on {device}, "
        f"{precision_reason(pipeline.precision_choice, device)}; batch {args.batch_size}")
    run = compute_stats(pipeline, images, batch_size=args.batch_size, quiet=args.quiet,
                        log=None if not args.quiet else log)
    if run.interrupted:
        log("vitviz stats: interrupted; nothing written")
        return 130
    if run.stats is None:
        raise ValueError(f"none of the {len(images)} image(s) could be analysed")
    written = write_outputs(run.stats, out, overwrite=args.overwrite)
    log(f"vitviz stats: {run.stats.images} image(s), {len(run.failures)} failed, in {run.seconds:.1f} s; wrote "
        + ", ".join(str(p) for p in written))
    n = len(run.failures)
    return FAILED_BASE + min(n, MAX_FAILED_STATUS) if n else status
