"""``vitviz merge``: the parts of a sharded ``vitviz export`` or ``vitviz stats`` joined into the files of one run.

Each shard wrote its part and its plan (:mod:`vitviz.batch.parts`): an export shard ``manifest-K-of-N.jsonl`` (its
maps lie in the same folder) and ``manifest-K-of-N.plan.json``; a stats shard ``attention_stats-K-of-N.npz`` (its
exact sums). A merge is prepared first (:func:`prepare_export`, :func:`prepare_stats`): every part read, the shards
checked to cover every image exactly once (:func:`vitviz.batch.parts.check_coverage`) with the same settings; only
then, and only when nothing is missing or doubled, :meth:`PreparedMerge.write` writes the merged files:

* export: ``manifest.jsonl``: one ``run`` line (the settings of the shards, the earliest start, and ``merged``: the
  shards joined), then every image's record in the order of the input list, as one run writes them;
* stats: ``attention_stats.csv``, ``artefact_frequency.csv`` and the figure, from the sum of the shards' exact sums,
  so the numbers equal one run's over all the images.

An image that failed in its shard is in the merged files as in one run's (its manifest record; left out of the
statistics) and counted in :attr:`PreparedMerge.failures`. Existing merged files are replaced only with
``overwrite``; the parts are kept.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from vitviz import __version__
from vitviz.batch.export_options import setting_names
from vitviz.batch.locking import ExportLock
from vitviz.batch.manifest import MANIFEST, ManifestError, line_problem, manifest_name, plan_name, read_lines
from vitviz.batch.parts import (
    Coverage,
    PartError,
    ShardPlan,
    ShardResult,
    check_coverage,
    parse_part_name,
    read_json,
)
from vitviz.batch.rerun import MODEL_KEY, setting_text
from vitviz.batch.stats import StatsAccumulator
from vitviz.batch.stats_files import PART_STEM, PART_SUFFIX, check_outputs, read_part, write_outputs
from vitviz.imaging import remove_dead_temporaries, write_atomic


@dataclass
class PreparedMerge:
    """A merge checked and ready to write.

    Attributes:
        kind: ``"export"``, ``"stats"`` or ``"evaluate"``.
        what: one line saying what is merged (the parts, the images, the files it writes).
        coverage: what :func:`~vitviz.batch.parts.check_coverage` found; ``coverage.problems``: what is missing or
            doubled (nothing may be written then).
        write: writes the merged files and returns them.
        release: gives back what the preparation holds (the export folder's lock).
    """

    kind: str
    what: str
    coverage: Coverage
    write: Callable[[], list[Path]]
    release: Callable[[], None] = lambda: None
    notes: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        return self.coverage.problems

    @property
    def failures(self) -> list[tuple[str, str]]:
        return self.coverage.failures


def find_parts(out: Path, stem: str, suffix: str) -> dict[tuple[int, int], Path]:
    """``(K, N)`` -> the part ``<stem>-K-of-N<suffix>`` in ``out``."""
    found = {}
    for p in sorted(out.glob(f"{stem}-*-of-*{suffix}")):
        parsed = parse_part_name(p.name)
        if parsed and parsed[0] == stem and parsed[2] == suffix and p.is_file():
            found[parsed[1]] = p
    return found


def settings_differ(parts: list[tuple[str, dict[str, Any]]], flags: dict[str, str] | None = None) -> str | None:
    """Why parts (``(label, settings)``) made with other settings than the first cannot be merged (the model by
    content first, then each setting by its flag: ``flags``), or None."""
    if not parts:
        return None
    label0, first = parts[0]
    flags = flags or {}
    for label, other in parts[1:]:
        diff = []
        if first.get(MODEL_KEY) != other.get(MODEL_KEY):
            a, b = (f"{str(x.get(MODEL_KEY) or '?')[:12]}..." + (f" from {x['model']}" if x.get("model") else "")
                    for x in (first, other))
            diff.append(f"the model (sha256 {a} in {label0}, {b} in {label})")
        for key in list(first) + [k for k in other if k not in first]:
            if key in (MODEL_KEY, "model") or json.dumps(first.get(key)) == json.dumps(other.get(key)):
                continue
            diff.append(f"{flags.get(key, '--' + key.replace('_', '-'))} {setting_text(first.get(key))} in {label0}, "
                        f"{setting_text(other.get(key))} in {label}")
        if diff:
            return f"{label} was made with other settings than {label0}: {'; '.join(diff)} (run every shard alike)"
    return None




# ---------------------------------------------------------------------------------------------------- export
def _read_manifest_part(path: Path) -> tuple[list[dict], list[dict]]:
    """The records and run lines of a shard's manifest (a last line cut short by a crash is left out).

    Raises:
        ManifestError: a line no run of vitviz export wrote (naming the file and the line).
    """
    lines, unterminated = read_lines(path)
    records, runs = [], []
    for i, line in enumerate(lines, 1):
        kind, value = line_problem(line)
        if kind == "record":
            records.append(value)
        elif kind == "run":
            runs.append(value)
        elif value is None and kind != "blank" and not (unterminated and i == len(lines)):
            raise ManifestError(f"{path} line {i}: {kind}: the manifest was changed by hand; repair or delete that "
                                "line")
    return records, runs


def prepare_export(out: str | Path, *, overwrite: bool = False) -> PreparedMerge | None:
    """The merge of the export shards' manifests in ``out`` (None when it holds none).

    Raises:
        ExportBusy: an export (a shard) is writing to ``out``.
        PartError, ManifestError: a part cannot be read.
        ValueError: the shards were made with other settings; FileExistsError: ``manifest.jsonl`` is an earlier
            merge (without ``overwrite``).
    """
    out = Path(out)
    manifests = find_parts(out, "manifest", ".jsonl")
    plans = find_parts(out, "manifest", ".plan.json")
    if not manifests and not plans:
        return None
    lock = ExportLock(out, (1, 1)).acquire()  # no shard may write while the parts are read and merged
    try:
        return _prepare_export(out, manifests, plans, lock, overwrite)
    except BaseException:
        lock.release()
        raise


def _prepare_export(out: Path, manifests: dict, plans: dict, lock: ExportLock, overwrite: bool) -> PreparedMerge:
    results: list[ShardResult] = []
    runs: dict[str, tuple[str, dict]] = {}  # request id -> (shard label, its earliest run line)
    requests: dict[str, str] = {}  # request id -> the first shard whose done images have it
    orphans: list[str] = []
    for shard in sorted(set(manifests) | set(plans)):
        k, n = shard
        if shard not in plans:
            orphans.append(f"{manifest_name(shard)} has no {plan_name(shard)} (written by an older vitviz, or the "
                           f"plan was deleted): run shard {k}/{n} again (it skips the images done and writes its plan)")
            continue
        plan = ShardPlan.from_json(read_json(plans[shard]), plans[shard])
        if plan.command != "export" or plan.shard != shard:
            raise PartError(f"{plans[shard]}: the plan of {plan.command} shard {plan.shard[0]}/{plan.shard[1]}, "
                            "not of this export shard")
        path = manifests.get(shard, out / manifest_name(shard))
        records, run_lines = _read_manifest_part(path) if path.is_file() else ([], [])
        for run in run_lines:
            rid = run["request"]
            if rid not in runs or _time(run) < _time(runs[rid][1]):
                runs[rid] = (plan.label, run)
        latest = {rec.get("output"): rec for rec in records}
        r = ShardResult(plan, path)
        for _, _, rel in plan.images:
            rec = latest.get(rel)
            if rec is None:
                continue
            if rec["status"] == "ok" and not all((out / f).is_file() for f in rec["files"]):
                continue  # its files are gone: not done
            r.done[rel] = rec
            requests.setdefault(rec["request"], plan.label)
            if rec["status"] != "ok":
                r.failed[rel] = str(rec.get("error") or "failed")
        results.append(r)
    cov = check_coverage(results, lambda s: f"{plan_name(s)} and {manifest_name(s)}")
    cov.problems[:0] = orphans
    if len(requests) > 1:
        labelled = [(label, runs[rid][1]["settings"] if rid in runs else {"request": rid})
                    for rid, label in requests.items()]
        raise ValueError(settings_differ(labelled, setting_names()) or "the shards were made with other settings")
    target = out / MANIFEST
    single = _single_run_records(target)
    if single:
        cov.problems.append(f"{target} holds {single} image record(s) of a run without shards, which the parts do "
                            f"again: move it away (or delete the parts) before merging")
    elif not cov.problems and (target.exists() or target.is_symlink()) and not overwrite:
        raise FileExistsError(f"{target} already exists (an earlier merge; pass --overwrite to replace it)")
    rid = next(iter(requests), None)
    run = dict(runs[rid][1]) if rid in runs else None
    n = cov.shards

    def write() -> list[Path]:
        lines = []
        if run is not None:
            run["merged"] = {"shards": n, "parts": [manifest_name((k, n)) for k in range(1, n + 1)],
                             "time": time.time(), "vitviz": __version__}
            lines.append({"run": run})
        lines += [r.done[rel] for rel, r in cov.order]
        data = "".join(json.dumps(x, ensure_ascii=False) + "\n" for x in lines).encode("utf-8")
        remove_dead_temporaries(target, ".jsonl.tmp")
        return [write_atomic(target, lambda fh: fh.write(data), overwrite=True, suffix=".jsonl.tmp")]

    what = f"export: {cov.describe(len(results), len(cov.order), 'done')} -> {target}"
    return PreparedMerge("export", what, cov, write, lock.release)


def _time(run: dict) -> float:
    t = run.get("time")
    return float(t) if isinstance(t, (int, float)) and not isinstance(t, bool) else float("inf")


def _single_run_records(path: Path) -> int:
    """How many image records ``manifest.jsonl`` holds when a run without shards wrote it (0 when it is missing or
    an earlier merge: its run line says ``merged``)."""
    if not path.is_file():
        return 0
    try:
        records, run_lines = _read_manifest_part(path)
    except ValueError:
        return 0  # damaged: replaced only with --overwrite, like a merge
    if any("merged" in run for run in run_lines):
        return 0
    return len(records)


# ---------------------------------------------------------------------------------------------------- stats
def prepare_stats(out: str | Path, *, overwrite: bool = False) -> PreparedMerge | None:
    """The merge of the stats shards' sums in ``out`` (None when it holds none).

    Raises:
        PartError: a part cannot be read; ValueError: parts made with other settings (or another model);
        FileExistsError: the outputs exist (without ``overwrite``).
    """
    out = Path(out)
    found = find_parts(out, PART_STEM, PART_SUFFIX)
    if not found:
        return None
    results, parts = [], []
    for shard, path in sorted(found.items()):
        part = read_part(path)
        if part.plan.command != "stats" or part.plan.shard != shard:
            raise PartError(f"{path}: holds {part.plan.command} shard {part.plan.shard[0]}/{part.plan.shard[1]}, "
                            "not the shard its name says")
        rel_of = {src: rel for _, src, rel in part.plan.images}
        r = ShardResult(part.plan, path, done={rel: True for _, _, rel in part.plan.images})
        for src, why in part.failures:
            if src in rel_of:
                r.failed[rel_of[src]] = why
        results.append(r)
        parts.append(part)
    problem = settings_differ([(p.plan.label, p.settings) for p in parts])
    if problem:
        raise ValueError(problem)
    cov = check_coverage(results, lambda s: f"{PART_STEM}-{s[0]}-of-{s[1]}{PART_SUFFIX}")
    acc = StatsAccumulator()
    if not cov.problems:
        for part in sorted(parts, key=lambda p: p.plan.shard):
            try:
                acc.add_shard(part.accumulator)  # exact: the order does not matter, but it is fixed anyway
            except ValueError as e:  # other layers or heads (another model), sums that overflow: name the part
                raise PartError(f"{found[part.plan.shard]}: cannot be added to the other parts ({e})") from None
        if acc.n == 0:
            raise ValueError(f"none of the {cov.images} image(s) could be analysed by any shard: there are no "
                             "statistics to write")
        check_outputs(out, overwrite=overwrite)

    def write() -> list[Path]:
        precision = str(parts[0].settings.get("precision", "")) if parts else ""  # (the same in every part)
        return write_outputs(replace(acc.stats(), precision=precision), out, overwrite=overwrite)

    done = sum(p.accumulator.n for p in parts)
    note = acc.stats().nan_note() if acc.n else ""
    what = f"stats: {cov.describe(len(parts), done, 'analysed')}{note} -> {out}"
    return PreparedMerge("stats", what, cov, write)
