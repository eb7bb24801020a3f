"""The files of ``vitviz stats``: the two CSVs (written, and ``attention_stats.csv`` read back for the window's
dataset curve) and all the outputs written together, atomically, refusing to replace files unless asked; and a
shard's part, ``attention_stats-K-of-N.npz``: its exact sums (:class:`~vitviz.batch.stats.StatsAccumulator`), its
plan and its failures, which ``vitviz merge`` adds up (:mod:`vitviz.batch.merge`)."""

from __future__ import annotations

import csv
import io
import json
import os
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vitviz._util.files import PendingOutputs, describe_os_error, output_folder_problem
from vitviz.batch.fixed_point import FixedSum
from vitviz.batch.parts import PartError, ShardPlan, part_name
from vitviz.batch.stats import (
    ARTEFACT_COLUMNS,
    ARTEFACT_CSV,
    FIGURE,
    STATS_COLUMNS,
    STATS_CSV,
    STATS_NUMBERS,
    DatasetStats,
    GridFlags,
    StatsAccumulator,
)
from vitviz.batch.stats_plot import figure_bytes
from vitviz.imaging import ExportError, remove_dead_temporaries, write_atomic


def csv_bytes(header: Sequence[str], rows: list[list[Any]]) -> bytes:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue().encode("utf-8")


def _num(x: float) -> str:
    return f"{float(x):.6g}"


def stats_rows(stats: DatasetStats) -> list[list[Any]]:
    L, H = stats.distance_mean.shape
    return [[stats.model, stats.images, layer, head, _num(stats.distance_mean[layer, head]),
             _num(stats.distance_sd[layer, head]), _num(stats.entropy_mean[layer, head]),
             _num(stats.entropy_sd[layer, head]), stats.precision] for layer in range(L) for head in range(H)]


def artefact_rows(stats: DatasetStats) -> list[list[Any]]:
    f = stats.artefact_frequency
    if f is None:
        return []
    n = stats.artefact_images
    return [[stats.model, n, r, c, _num(f[r, c]), int(round(f[r, c] * n))] for r in range(f.shape[0])
            for c in range(f.shape[1])]


def read_stats_csv(path: str | os.PathLike) -> DatasetStats:
    """The per-layer-and-head statistics of an ``attention_stats.csv`` (the artefact frequency is not in it).

    Raises:
        ValueError: naming the file and what is wrong (not such a CSV, missing columns, layers or heads missing).
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise ValueError(f"{p}: not a text file (expected the attention_stats.csv of 'vitviz stats')") from None
    except OSError as e:
        raise ValueError(f"{p}: cannot read ({e.strerror or e})") from None
    rows = list(csv.DictReader(io.StringIO(text)))
    missing = [c for c in STATS_COLUMNS if c != "precision" and (not rows or c not in rows[0])]  # (older: none)
    if missing:
        raise ValueError(f"{p}: not an attention_stats.csv of 'vitviz stats' (missing columns: "
                         f"{', '.join(missing)})")
    try:
        cells = {(int(r["layer"]), int(r["head"])): r for r in rows}
        L = max(k[0] for k in cells) + 1
        H = max(k[1] for k in cells) + 1
        if len(cells) != L * H or min(min(k) for k in cells) < 0:
            raise ValueError("layers or heads are missing")
        arrays = {c: np.array([[float(cells[(l, h)][c]) for h in range(H)] for l in range(L)])
                  for c in STATS_NUMBERS}
        images = int(rows[0]["images"])
    except (KeyError, ValueError) as e:
        raise ValueError(f"{p}: not a complete attention_stats.csv ({e})") from None
    return DatasetStats(model=rows[0]["model"], images=images, distance_mean=arrays["mean_distance_px"],
                        distance_sd=arrays["sd_distance_px"], entropy_mean=arrays["mean_entropy_nats"],
                        entropy_sd=arrays["sd_entropy_nats"], precision=rows[0].get("precision") or "")


def write_outputs(stats: DatasetStats, out: str | os.PathLike, *, overwrite: bool = False) -> list[Path]:
    """The two CSVs and the figure (PNG, SVG) in ``out`` (created if missing), each written atomically; nothing is
    written when any of them exists and ``overwrite`` is False, unless a run killed while writing them left its
    journal naming it (:class:`~vitviz._util.files.PendingOutputs`): then the rerun replaces what that run wrote,
    and the temporary file it was writing goes."""
    folder = Path(out)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ExportError(folder, f"cannot create the output folder ({describe_os_error(e)})") from None
    files = {folder / STATS_CSV: lambda: csv_bytes(STATS_COLUMNS, stats_rows(stats)),
             folder / f"{FIGURE}.png": lambda: figure_bytes(stats, "png"),
             folder / f"{FIGURE}.svg": lambda: figure_bytes(stats, "svg")}
    if stats.artefact_frequency is not None:
        files[folder / ARTEFACT_CSV] = lambda: csv_bytes(ARTEFACT_COLUMNS, artefact_rows(stats))
    check_outputs(folder, overwrite=overwrite)
    pending = PendingOutputs(folder, "stats")
    ours = pending.left()
    pending.begin(list(files))
    written = []
    for path, make in files.items():
        data = make()
        remove_dead_temporaries(path, path.suffix + ".tmp")
        written.append(write_atomic(path, lambda fh, d=data: fh.write(d), overwrite=overwrite or path.name in ours,
                                    suffix=path.suffix + ".tmp"))
    pending.end()
    return written


def output_paths(out: str | os.PathLike) -> list[Path]:
    """Every file ``vitviz stats`` may write in ``out``."""
    folder = Path(out)
    return [folder / STATS_CSV, folder / ARTEFACT_CSV, folder / f"{FIGURE}.png", folder / f"{FIGURE}.svg"]


def check_outputs(out: str | os.PathLike, *, overwrite: bool) -> None:
    """Refuse, before any work, an output folder that cannot take files (a file in its place or above it, no
    permission: :func:`vitviz._util.files.output_folder_problem`, the check of ``vitviz export`` too) and outputs
    that exist (without ``overwrite``) or are folders. Nothing is created."""
    _check_paths(out, output_paths(out), overwrite, PendingOutputs(out, "stats").left())


def _check_paths(out: str | os.PathLike, paths: list[Path], overwrite: bool, ours: set[str] = frozenset()) -> None:
    """The output folder's problem, or a folder in the place of one of ``paths``, or one that exists (without
    ``overwrite``, and not named by a killed run's journal, ``ours``): ExportError / FileExistsError naming it."""
    problem = output_folder_problem(out)
    if problem:
        raise ExportError(out, problem)
    for p in paths:
        if p.is_dir():
            raise ExportError(p, "a folder of that name exists")
        if not overwrite and p.name not in ours and (p.exists() or p.is_symlink()):
            raise FileExistsError(f"{p} already exists (pass --overwrite to replace it)")


PLAUSIBLE_SUM = 1 << 56  # a part's exact sums (integer parts) stay below: 2^30 images x values below 2^26
PART_STEM = "attention_stats"  # a shard's part: attention_stats-K-of-N.npz
PART_SUFFIX = ".npz"
_PART_KIND = "vitviz stats part"


def part_path(out: str | os.PathLike, shard: tuple[int, int]) -> Path:
    """Where shard ``(K, N)`` of ``vitviz stats`` saves its sums: ``OUT/attention_stats-K-of-N.npz``."""
    return Path(out) / part_name(PART_STEM, shard, PART_SUFFIX)


def check_part(out: str | os.PathLike, shard: tuple[int, int], *, overwrite: bool) -> None:
    """Refuse, before any work, a shard's part that cannot be written (the output folder's problem) or exists
    (without ``overwrite``)."""
    _check_paths(out, [part_path(out, shard)], overwrite)


@dataclass
class StatsPart:
    """What a shard of ``vitviz stats`` saved: its plan, its exact sums, its failures ``(source, why)`` and the
    settings its numbers depend on (the model by content, the precision)."""

    plan: ShardPlan
    accumulator: StatsAccumulator
    failures: list[tuple[str, str]] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)


def write_part(path: str | os.PathLike, part: StatsPart, *, overwrite: bool = False) -> Path:
    """Save a shard's :class:`StatsPart` (npz: the sums as int64 arrays, the rest as JSON), atomically."""
    acc = part.accumulator
    arrays: dict[str, np.ndarray] = {}
    for k in acc.sums:
        arrays.update(acc.sums[k].arrays(f"{k}_sum"))
        arrays.update(acc.squares[k].arrays(f"{k}_sq"))
    grids = []
    for i, (shape, g) in enumerate(sorted(acc.grids.items())):
        arrays[f"grid{i}_flags"] = g.flags
        grids.append({"shape": list(shape), "images": g.images, "first": g.first})
    meta = {"kind": _PART_KIND, "plan": part.plan.to_json(), "n": acc.n, "last": list(acc.last), "grids": grids,
            "stats": sorted(acc.sums), "failures": [list(f) for f in part.failures], "settings": part.settings}
    if acc.n:  # layers x heads: read back against the arrays (a damaged part holding other layers is named)
        meta["cells"] = list(acc.sums["distance"].shape)
    arrays["meta"] = np.array(json.dumps(meta, ensure_ascii=False))
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    data = buf.getvalue()
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ExportError(target.parent, f"cannot create the output folder ({describe_os_error(e)})") from None
    remove_dead_temporaries(target, ".npz.tmp")
    return write_atomic(target, lambda fh: fh.write(data), overwrite=overwrite, suffix=".npz.tmp",
                        exists_message=f"{target} already exists (pass --overwrite to replace it)")


def read_part(path: str | os.PathLike) -> StatsPart:
    """The :class:`StatsPart` a shard saved.

    Raises:
        PartError: naming the file when it cannot be read or is not such a part.
    """
    p = Path(path)
    try:
        data = p.read_bytes()
    except OSError as e:
        raise PartError(f"{p}: cannot read ({e.strerror or e})") from None
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as e:
        raise PartError(f"{p}: not a part of vitviz stats (not an npz file: {e})") from None
    try:
        meta = json.loads(str(arrays["meta"][()]))
        if not isinstance(meta, dict) or meta.get("kind") != _PART_KIND:
            raise ValueError("no description of a vitviz stats shard")
        plan = ShardPlan.from_json(meta["plan"], p)
        acc = StatsAccumulator()
        acc.n = int(meta["n"])
        if not 0 <= acc.n <= len(plan.images):  # (a damaged part: -5 images, more than its shard was given)
            raise ValueError(f"it counts {acc.n} image(s) analysed, but its shard has {len(plan.images)}")
        index, model, tokens = meta["last"]
        acc.last = (int(index), str(model), int(tokens))
        for k in meta["stats"] if acc.n else ():
            acc.sums[str(k)] = FixedSum.from_arrays(arrays, f"{k}_sum")
            acc.squares[str(k)] = FixedSum.from_arrays(arrays, f"{k}_sq")
        if acc.n and sorted(acc.sums) != ["distance", "entropy"]:
            raise ValueError(f"statistics {sorted(acc.sums)}")
        cells = meta.get("cells")  # (parts written before it was recorded have none)
        for k, fixed in [*acc.sums.items(), *acc.squares.items()] if cells is not None else ():
            if list(fixed.shape) != [int(x) for x in cells]:
                raise ValueError(f"it holds sums of {k} for {' x '.join(map(str, fixed.shape))} layers x heads, "
                                 f"but says {' x '.join(map(str, cells))}")
        for k, fixed in [*acc.sums.items(), *acc.squares.items()]:  # sums of distances, entropies and their squares
            if (fixed.hi < 0).any() or (fixed.hi >= PLAUSIBLE_SUM).any():  # are >= 0, and far below int64's end
                raise ValueError(f"the sums of {k} are negative or beyond any dataset (damaged)")
        for i, g in enumerate(meta["grids"]):
            flags = np.asarray(arrays[f"grid{i}_flags"])
            if flags.dtype != np.int64 or list(flags.shape) != [int(x) for x in g["shape"]]:
                raise ValueError(f"grid{i}_flags")
            if not 0 <= int(g["images"]) <= acc.n or (flags < 0).any() or (flags > int(g["images"])).any():
                raise ValueError(f"grid{i}: counts outside 0..{acc.n} images")
            acc.grids[tuple(flags.shape)] = GridFlags(flags.copy(), int(g["images"]), int(g["first"]))
        failures = [(str(a), str(b)) for a, b in meta["failures"]]
        settings = meta.get("settings") or {}
        if not isinstance(settings, dict):
            raise ValueError("settings")
    except PartError:
        raise
    except (KeyError, TypeError, ValueError) as e:
        raise PartError(f"{p}: not a complete part of vitviz stats ({type(e).__name__}: {e})") from None
    return StatsPart(plan, acc, failures, settings)
