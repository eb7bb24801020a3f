"""``vitviz merge OUT``: the parts that the shards of ``vitviz export``, ``vitviz stats`` or ``vitviz evaluate`` wrote
into ``OUT`` (``--shard K/N``, torchrun, SLURM: :mod:`vitviz.batch.launcher`) joined into the files of one run.

Which command wrote the folder is read from its parts (``manifest-K-of-N.jsonl`` with its ``.plan.json``,
``attention_stats-K-of-N.npz``, ``NAME-K-of-N.evaluate.json``; a folder may hold several). Every part is read and
checked first (:mod:`vitviz.batch.merge`, :mod:`vitviz.evaluate.table_parts`): a shard missing, an image not done or
done twice is named, one line each, and nothing is written (exit 1). Exit status: 0 merged; 1 missing or doubled;
2 could not merge (no parts, a damaged part, shards made with other settings, a merged file that exists without
``--overwrite``); 64 + n: merged, and n images had failed in their shards (named, as the command itself names them).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from vitviz._util.files import PendingOutputs
from vitviz.batch.failures import FAILED_BASE, MAX_FAILED_STATUS
from vitviz.batch.merge import PreparedMerge, prepare_export, prepare_stats, settings_differ
from vitviz.batch.parts import PartError, ShardPlan, ShardResult, check_coverage, names
from vitviz.cli.commands import summary
from vitviz.cli.shared import Reporter, add_debug
from vitviz.evaluate.report import check_writable, format_mean_table, write_csv
from vitviz.evaluate.table_parts import PART_SUFFIX, find_parts, read_part

MISSING_OR_DOUBLED = 1


def add_parser(sub) -> None:
    mg = sub.add_parser(
        "merge", help=summary("merge"),
        description="Join the parts that the shards of vitviz export, stats or evaluate wrote (--shard K/N, "
                    "torchrun, SLURM job arrays or srun) into the files of one run over all the images: export's "
                    "manifest.jsonl (records in input order), stats' CSVs and figure (from the shards' exact sums: "
                    "the numbers of one run), evaluate's CSV and mean. Checks first that every image is done exactly "
                    "once and names what is missing or doubled (then nothing is written). Exit status: 0, 1 (missing "
                    "or doubled), 2 (could not merge), 64 + n (merged; n images had failed in their shards).")
    mg.add_argument("out", metavar="OUT", help="the folder the shards wrote into (export's and stats' --out, the "
                                               "folder of evaluate's --csv)")
    mg.add_argument("--overwrite", action="store_true", help="replace the merged files of an earlier merge")
    add_debug(mg)


def prepare_evaluate(out: Path, overwrite: bool) -> list[PreparedMerge]:
    """One merge per evaluation whose shards' parts lie in ``out`` (``NAME-K-of-N.evaluate.json``)."""
    prepared = []
    for stem, found in find_parts(out).items():
        results, parts = [], []
        for shard, path in sorted(found.items()):
            part = read_part(path)
            plan = ShardPlan.from_json(part.plan, path)
            if plan.command != "evaluate" or plan.shard != shard:
                raise PartError(f"{path}: holds {plan.command} shard {plan.shard[0]}/{plan.shard[1]}, not the shard "
                                "its name says")
            by_source: dict[str, list] = {}  # every table of an image (one per prompt or point label)
            for t in part.tables:
                by_source.setdefault(t.source, []).append(t)
            failed = dict(part.failures)
            r = ShardResult(plan, path)
            for _, src, rel in plan.images:
                if src in by_source or src in failed:
                    r.done[rel] = by_source.get(src)
                if src in failed:
                    r.failed[rel] = failed[src]
            results.append(r)
            parts.append(part)
        csvs = sorted({p.csv for p in parts})
        if len(csvs) > 1:
            raise PartError(f"the parts {stem}-K-of-N{PART_SUFFIX} in {out} name {len(csvs)} CSV files "
                            f"({', '.join(csvs)}): the shards were given other --csv names")
        problem = settings_differ([(r.plan.label, p.settings) for r, p in zip(results, parts)])
        if problem:
            raise ValueError(problem)
        cov = check_coverage(results, lambda s, stem=stem: f"{stem}-{s[0]}-of-{s[1]}{PART_SUFFIX}")
        tables = [t for rel, r in cov.order if r.done[rel] is not None for t in r.done[rel]]
        target = out / csvs[0]
        if not cov.problems and tables:
            check_writable(target, overwrite=overwrite)

        def write(target: Path = target, tables: list = tables) -> list[Path]:
            if len(tables) > 1:  # the last block of one run's output
                print(format_mean_table(tables), flush=True)
            return [write_csv(target, tables, overwrite=overwrite)] if tables else []

        done = sum(len(p.tables) for p in parts)
        what = f"evaluate: {cov.describe(len(parts), done, 'evaluated')} -> {target}"
        prepared.append(PreparedMerge("evaluate", what, cov, write))
    return prepared


def run(args: argparse.Namespace, report: Reporter) -> int:
    """Prepare every merge the folder holds; write them all only when none has a problem."""
    out = Path(args.out)
    if not out.is_dir():
        raise ValueError(f"{out}: {'not a folder' if out.exists() else 'no such folder'} (give the folder the shards "
                         "wrote into)")

    def log(line: str) -> None:
        print(f"vitviz merge: {line}", file=sys.stderr, flush=True)

    prepared: list[PreparedMerge] = []
    pending = PendingOutputs(out, "merge")  # a merge killed while writing: its rerun replaces what it wrote
    overwrite = args.overwrite or bool(pending.left())
    try:
        for prepare in (prepare_export, prepare_stats):
            p = prepare(out, overwrite=overwrite)
            if p is not None:
                prepared.append(p)
        prepared += prepare_evaluate(out, overwrite)
        if not prepared:
            raise ValueError(f"{out} holds no parts of a sharded vitviz export, stats or evaluate (manifest-K-of-N"
                             f".jsonl, attention_stats-K-of-N.npz, NAME-K-of-N{PART_SUFFIX})")
        for p in prepared:
            log(p.what)
        problems = [(p.kind, line) for p in prepared for line in p.problems]
        if problems:
            for kind, line in problems:
                log(f"{kind}: {line}")
            log("nothing written")
            return MISSING_OR_DOUBLED
        pending.begin([p.kind for p in prepared])
        written = [path for p in prepared for path in p.write()]
        pending.end()
    finally:
        for p in prepared:
            p.release()
    failures = [(p.kind, f) for p in prepared for f in p.failures]
    if failures:
        log(f"{len(failures)} image(s) had failed in their shards (in the merged files as one run has them): "
            + names([why for _, (_, why) in failures]))
    log("wrote " + ", ".join(str(w) for w in written))
    return FAILED_BASE + min(len(failures), MAX_FAILED_STATUS) if failures else 0
