"""Summaries of several images' faithfulness tables: the mean over the images (text) and the CSV file; with ground
truth, the localisation metrics' means with their 95 % confidence intervals per view."""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from vitviz._util.files import folder_problem, output_folder_problem
from vitviz.evaluate.metrics import mean_ci95
from vitviz.evaluate.outcomes import FaithfulnessTable, random_row_name
from vitviz.evaluate.protocol import LOCALISATION_METRICS
from vitviz.imaging import ExportError, remove_dead_temporaries, write_atomic


def mean_over_images(tables: Sequence[FaithfulnessTable]) -> dict[str, tuple[float, float, float, float]]:
    """Per view key: ``(mean deletion AUC, mean insertion AUC, 0, 0)`` over the tables where the view has curves;
    for ``"random"``: the mean over images of the random AUCs and their standard deviation over the rankings
    (ranking r's AUC averaged over the images, then the spread of those ``R`` means; ``ddof=1``)."""
    out: dict[str, tuple[float, float, float, float]] = {}
    if not tables:
        return out
    keys: list[str] = []
    for t in tables:
        keys += [v.key for v in t.views if v.key not in keys]
    for k in keys:
        d = [v.deletion_auc for t in tables for v in t.views if v.key == k and v.deletion is not None]
        i = [v.insertion_auc for t in tables for v in t.views if v.key == k and v.insertion is not None]
        if d:
            out[k] = (float(np.mean(d)), float(np.mean(i)), 0.0, 0.0)
    R = {t.random_deletion.seeds for t in tables if t.has_curves}
    if len(R) == 1 and all(t.has_curves for t in tables):
        rd = np.stack([t.random_deletion.aucs for t in tables]).mean(0)
        ri = np.stack([t.random_insertion.aucs for t in tables]).mean(0)
        out["random"] = (float(rd.mean()), float(ri.mean()), _std(rd), _std(ri))
    return out


def localisation_summary(tables: Sequence[FaithfulnessTable]) -> dict[str, dict[str, tuple[float, float, int]]]:
    """Per view key and localisation metric: ``(mean, 95 % CI half-width, n)`` over the images where the value is
    defined (:func:`vitviz.evaluate.metrics.mean_ci95`)."""
    keys: list[str] = []
    for t in tables:
        keys += [v.key for v in t.views if v.key not in keys and v.localisation is not None]
    return {k: {m: mean_ci95([v.localisation_value(m) for t in tables for v in t.views if v.key == k])
                for m in LOCALISATION_METRICS} for k in keys}


def format_localisation_summary(tables: Sequence[FaithfulnessTable]) -> str:
    """:func:`localisation_summary` as text: ``mean +- half-width (n)`` per view and metric that has values."""
    summary = localisation_summary(tables)
    names = [m for m in LOCALISATION_METRICS if any(s[m][2] for s in summary.values())]
    if not names:
        return "localisation: no defined value over the images"
    width = max(len(k) for k in summary)
    lines = [f"localisation, mean over {len(tables)} images +- 95% confidence interval (t), higher is better",
             f"  {'view':<{width}s}  " + "  ".join(f"{m:>24s}" for m in names)]
    for k, s in summary.items():
        cells = []
        for m in names:
            mean, ci, n = s[m]
            cells.append("-" if n == 0 else f"{mean:.4f} +- {ci:.4f} ({n})" if n > 1 else f"{mean:.4f} ({n})")
        lines.append(f"  {k:<{width}s}  " + "  ".join(f"{c:>24s}" for c in cells))
    return "\n".join(lines)


def format_mean_table(tables: Sequence[FaithfulnessTable]) -> str:
    """The mean over the images of :func:`mean_over_images` as text (best view per column marked with ``*``); then
    the localisation summary (:func:`format_localisation_summary`) when the tables have ground truth."""
    if not tables:
        return "no images"
    loc = format_localisation_summary(tables) if any(t.has_localisation for t in tables) else ""
    if not all(t.has_curves for t in tables):
        return loc or f"{len(tables)} images, no perturbation curves"
    return _format_curve_means(tables) + ("\n" + loc if loc else "")


def _format_curve_means(tables: Sequence[FaithfulnessTable]) -> str:
    means = mean_over_images(tables)
    views = {k: v for k, v in means.items() if k != "random"}
    t0 = tables[0]
    lines = [f"mean over {len(tables)} images: {t0.steps} steps, {t0.baseline} baseline"]
    rname = random_row_name(t0.random_deletion)
    width = max([len(k) for k in views] + [len(rname)])
    lines.append(f"  {'view':<{width}s}  {'deletion AUC (lower is better)':>31s}  "
                 f"{'insertion AUC (higher is better)':>33s}")
    best_d = min(views, key=lambda k: views[k][0]) if views else None
    best_i = max(views, key=lambda k: views[k][1]) if views else None
    for k, (d, i, _, _) in views.items():
        lines.append(f"  {k:<{width}s}  {f'{d:.4f}' + ('*' if k == best_d else ' '):>31s}  "
                     f"{f'{i:.4f}' + ('*' if k == best_i else ' '):>33s}")
    if "random" in means:
        d, i, sd, si = means["random"]
        lines.append(f"  {rname:<{width}s}  {f'{d:.4f} +- {sd:.4f} ':>31s}  {f'{i:.4f} +- {si:.4f} ':>33s}")
    return "\n".join(lines)


CSV_COLUMNS = ("image", "target", "label", "view", "deletion_auc", "insertion_auc", "deletion_std",
               "insertion_std", "steps", "baseline", "seeds")


def csv_columns(tables: Sequence[FaithfulnessTable]) -> tuple[str, ...]:
    """The CSV's columns: ``image, target, label, view``, the perturbation columns when the curves ran, the
    localisation metrics (:data:`~vitviz.evaluate.protocol.LOCALISATION_METRICS`) when there is ground truth."""
    curves = not tables or all(t.has_curves for t in tables)
    loc = any(t.has_localisation for t in tables)
    return CSV_COLUMNS[:4] + (CSV_COLUMNS[4:] if curves else ()) + (LOCALISATION_METRICS if loc else ())


def write_csv(path: str | os.PathLike, tables: Sequence[FaithfulnessTable], *, overwrite: bool = False) -> Path:
    """Write the tables (one row per image and view, the random row with its standard deviations, then the means
    over the images with ``image = "mean"``) as CSV (``target``: the class, empty for a similarity or callable
    target; ``label``: the class's name or the target in words, "similar to image ref.jpg"), atomically: a
    temporary file in the same folder, then a hard link (which fails when the name exists) or, with ``overwrite``, a
    rename. With ground truth, the localisation columns (:func:`csv_columns`; empty where undefined) and, after the
    means, a row per view with ``image = "ci95"``: the half-width of each metric's 95 % confidence interval. Without
    the curves (``--only localisation``) the perturbation columns and the random row are left out.

    Raises:
        FileExistsError: the file exists and ``overwrite`` is False.
        ExportError: the folder is missing, is a file or is not writable; the disk is full ...
    """
    target = Path(path)
    check_writable(target, overwrite=overwrite)  # missing folder, a file as parent, an existing file
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    columns = csv_columns(tables)
    curves, loc = "deletion_auc" in columns, LOCALISATION_METRICS[0] in columns
    w.writerow(columns)
    blank = [""] * len(LOCALISATION_METRICS) if loc else []
    for t in tables:
        for v in t.views:
            row = [t.source, t.target, t.label, v.key]
            if curves:
                row += [_num(v.deletion_auc), _num(v.insertion_auc), "", "", t.steps, t.baseline, ""]
            w.writerow(row + ([_num(v.localisation_value(m)) for m in LOCALISATION_METRICS] if loc else []))
        if curves:
            rd, ri = t.random_deletion, t.random_insertion
            w.writerow([t.source, t.target, t.label, "random", _num(rd.auc_mean), _num(ri.auc_mean),
                        _num(rd.auc_std), _num(ri.auc_std), t.steps, t.baseline, rd.seeds] + blank)
    if len(tables) > 1:
        summary = localisation_summary(tables) if loc else {}
        means = mean_over_images(tables) if curves else {k: None for k in summary}
        for k, vals in means.items():
            row = ["mean", "", "", k]
            if curves:
                d, i, sd, si = vals
                row += [_num(d), _num(i), _num(sd) if k == "random" else "", _num(si) if k == "random" else "",
                        tables[0].steps, tables[0].baseline, tables[0].random_deletion.seeds if k == "random" else ""]
            w.writerow(row + ([_num(summary[k][m][0]) for m in LOCALISATION_METRICS] if k in summary else blank))
        for k, s in summary.items():
            w.writerow(["ci95", "", "", k] + ([""] * 7 if curves else [])
                       + [_num(s[m][1]) for m in LOCALISATION_METRICS])
    data = buf.getvalue().encode("utf-8")
    remove_dead_temporaries(target, ".tmp")  # a run killed while writing it left its temporary file
    return write_atomic(target, lambda fh: fh.write(data), overwrite=overwrite, suffix=".tmp",
                        exists_message=f"{target} already exists (pass --overwrite to replace it)")


def check_writable(path: str | os.PathLike, *, overwrite: bool = False) -> None:
    """Refuse, before any work, a CSV path that :func:`write_csv` would refuse: an existing file without
    ``overwrite``, a folder of that name, a missing parent or one that is a file, a folder that does not take new
    files (probed as ``vitviz export`` and ``vitviz stats`` probe theirs:
    :func:`vitviz._util.files.output_folder_problem`)."""
    target = Path(path)
    if target.is_dir():
        raise ExportError(target, "a folder of that name exists")
    if not overwrite and (target.exists() or target.is_symlink()):
        raise FileExistsError(f"{target} already exists (pass --overwrite to replace it)")
    folder = target.parent if str(target.parent) else Path(".")
    problem = folder_problem(folder) or output_folder_problem(folder)
    if problem:
        raise ExportError(target, problem)


def _std(a: np.ndarray) -> float:
    return float(a.std(ddof=1)) if a.size > 1 else 0.0


def _num(v: float) -> str:
    return "" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:.6f}"
