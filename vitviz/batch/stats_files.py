"""The files of ``vitviz stats``: the two CSVs (written, and ``attention_stats.csv`` read back for the window's
dataset curve) and all the outputs written together, atomically, refusing to replace files unless asked."""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from vitviz._util.files import describe_os_error, output_folder_problem
from vitviz.batch.stats import (
    ARTEFACT_COLUMNS,
    ARTEFACT_CSV,
    FIGURE,
    STATS_COLUMNS,
    STATS_CSV,
    DatasetStats,
)
from vitviz.batch.stats_plot import figure_bytes
from vitviz.imaging import ExportError, write_atomic


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
             _num(stats.entropy_sd[layer, head])] for layer in range(L) for head in range(H)]


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
    missing = [c for c in STATS_COLUMNS if not rows or c not in rows[0]]
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
                  for c in STATS_COLUMNS[4:]}
        images = int(rows[0]["images"])
    except (KeyError, ValueError) as e:
        raise ValueError(f"{p}: not a complete attention_stats.csv ({e})") from None
    return DatasetStats(model=rows[0]["model"], images=images, distance_mean=arrays["mean_distance_px"],
                        distance_sd=arrays["sd_distance_px"], entropy_mean=arrays["mean_entropy_nats"],
                        entropy_sd=arrays["sd_entropy_nats"])



def write_outputs(stats: DatasetStats, out: str | os.PathLike, *, overwrite: bool = False) -> list[Path]:
    """The two CSVs and the figure (PNG, SVG) in ``out`` (created if missing), each written atomically; nothing is
    written when any of them exists and ``overwrite`` is False."""
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
    written = []
    for path, make in files.items():
        data = make()
        written.append(write_atomic(path, lambda fh, d=data: fh.write(d), overwrite=overwrite,
                                    suffix=path.suffix + ".tmp"))
    return written


def output_paths(out: str | os.PathLike) -> list[Path]:
    """Every file ``vitviz stats`` may write in ``out``."""
    folder = Path(out)
    return [folder / STATS_CSV, folder / ARTEFACT_CSV, folder / f"{FIGURE}.png", folder / f"{FIGURE}.svg"]


def check_outputs(out: str | os.PathLike, *, overwrite: bool) -> None:
    """Refuse, before any work, an output folder that cannot take files (a file in its place or above it, no
    permission: :func:`vitviz._util.files.output_folder_problem`, the check of ``vitviz export`` too) and outputs
    that exist (without ``overwrite``) or are folders. Nothing is created."""
    problem = output_folder_problem(out)
    if problem:
        raise ExportError(out, problem)
    for p in output_paths(out):
        if p.is_dir():
            raise ExportError(p, "a folder of that name exists")
        if not overwrite and (p.exists() or p.is_symlink()):
            raise FileExistsError(f"{p} already exists (pass --overwrite to replace it)")
