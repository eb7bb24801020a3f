"""``vitviz stats --model M INPUT ... --out DIR``: attention distance and entropy per layer and head and the
artefact frequency over the images, as CSV files and a figure (:mod:`vitviz.batch.stats`). A shard (``--shard K/N``
or a launcher's variables) saves its exact sums instead (``attention_stats-K-of-N.npz``), which ``vitviz merge DIR``
adds up into the files of one run."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from vitviz.batch.failures import FAILED_BASE, MAX_FAILED_STATUS
from vitviz.batch.inputs import inputs_for_cli, take_shard
from vitviz.batch.parts import plan_shard
from vitviz.batch.stats import ARTEFACT_CSV, FIGURE, STATS_CSV, compute_stats
from vitviz.batch.stats_files import StatsPart, check_outputs, check_part, part_path, write_outputs, write_part
from vitviz.cli.batch_flags import (
    add_batch_arguments,
    add_shard_argument,
    announce,
    check_workers,
    join_signed,
    shard_and_device,
)
from vitviz.cli.commands import summary
from vitviz.cli.run_flags import resolve_run_flags
from vitviz.cli.shared import Reporter, add_debug, add_load_options, load


def prepare_argv(argv: Sequence[str]) -> list[str]:
    """``--shard -1/2`` reaches its check (see :func:`vitviz.cli.batch_flags.join_signed`)."""
    return join_signed(argv, ("--shard", "--batch-size"))


def add_parser(sub) -> None:
    st = sub.add_parser(
        "stats", help=summary("stats"),
        description="Mean attention distance and entropy per layer and head (mean and standard deviation over the "
                    "images; the ViT paper's Fig. 7 right) and how often each patch position holds a high-norm "
                    "token; writes CSV files and a figure (PNG, SVG). A shard (--shard K/N, or torchrun's or "
                    "SLURM's variables) saves its exact sums in attention_stats-K-of-N.npz instead; 'vitviz merge "
                    "DIR' adds them up into the files of one run, with the same numbers.")
    add_batch_arguments(st, f"output folder for {STATS_CSV}, {ARTEFACT_CSV} and {FIGURE}.png/.svg")
    add_shard_argument(st)
    add_load_options(st)
    add_debug(st)


def run(args: argparse.Namespace, report: Reporter) -> int:
    """``vitviz stats``: returns the exit status (0; 2: could not run or no image could be read; 64 + n: n images
    failed; 130: interrupted, nothing written)."""
    from vitviz.batch.fingerprint import model_sha256  # torch: when the command runs, not for its --help
    from vitviz.pipeline import Pipeline

    shard, device, origin, line = shard_and_device(args.shard, args.device, "stats")
    sharded = shard[1] > 1
    run_flags = resolve_run_flags(args, "stats", device=device)
    device = run_flags.device
    workers = check_workers(args.workers)
    out = Path(args.out)
    if sharded:
        check_part(out, shard, overwrite=args.overwrite)  # where the results go, before minutes of work
    else:
        check_outputs(out, overwrite=args.overwrite)
    images, status = inputs_for_cli(args.inputs, report)
    if not images:
        return 2
    announce(line)  # the first line, once the arguments are checked: which shard, from which launcher
    plan = plan_shard("stats", images, shard, origin) if sharded else None
    todo = take_shard(images, *shard)
    model = load(args, args.model)
    pipeline = Pipeline(model, device=device, precision=args.precision)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    part = f", shard {shard[0]}/{shard[1]} of {len(images)}" if sharded else ""
    log(run_flags.line(getattr(pipeline.spec, "name", "model"), lead=f"{len(todo)} image(s){part}"))
    run = compute_stats(pipeline, todo, batch_size=args.batch_size, quiet=args.quiet, workers=workers,
                        log=None if not args.quiet else log,
                        indices=[i for i, _, _ in plan.images] if plan is not None else None)
    if run.interrupted:
        log("vitviz stats: interrupted; nothing written")
        return 130
    n = len(run.failures)
    if plan is not None:  # a shard: its exact sums, for vitviz merge
        settings = {"model_sha256": model_sha256(pipeline.model), "model": args.model,
                    "precision": pipeline.precision}
        written = write_part(part_path(out, shard), StatsPart(plan, run.accumulator, run.failures, settings),
                             overwrite=args.overwrite)
        log(f"vitviz stats: {run.accumulator.n} image(s), {n} failed, in {run.seconds:.1f} s; wrote {written} "
            f"(shard {shard[0]}/{shard[1]}: 'vitviz merge {out}' joins the shards)")
    else:
        if run.stats is None:
            raise ValueError(f"none of the {len(images)} image(s) could be analysed")
        written = write_outputs(replace(run.stats, precision=pipeline.precision), out, overwrite=args.overwrite)
        log(f"vitviz stats: {run.stats.images} image(s), {n} failed, in {run.seconds:.1f} s{run.stats.nan_note()}; "
            "wrote " + ", ".join(str(p) for p in written))
    return FAILED_BASE + min(n, MAX_FAILED_STATUS) if n else status
