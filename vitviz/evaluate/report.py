"""Summaries of several images' faithfulness tables: the mean over the images (text) and the CSV file."""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from vitviz._util.files import folder_problem, output_folder_problem
from vitviz.evaluate.outcomes import FaithfulnessTable, random_row_name
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
    R = {t.random_deletion.seeds for t in tables}
    if len(R) == 1:
        rd = np.stack([t.random_deletion.aucs for t in tables]).mean(0)
        ri = np.stack([t.random_insertion.aucs for t in tables]).mean(0)
        out["random"] = (float(rd.mean()), float(ri.mean()), _std(rd), _std(ri))
    return out


def format_mean_table(tables: Sequence[FaithfulnessTable]) -> str:
    """The mean over the images of :func:`mean_over_images` as text (best view per column marked with ``*``)."""
    means = mean_over_images(tables)
    views = {k: v for k, v in means.items() if k != "random"}
    if not tables:
        return "no images"
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


def write_csv(path: str | os.PathLike, tables: Sequence[FaithfulnessTable], *, overwrite: bool = False) -> Path:
    """Write the tables (one row per image and view, the random row with its standard deviations, then the means
    over the images with ``image = "mean"``) as CSV (``target``: the class, empty for a similarity or callable
    target; ``label``: the class's name or the target in words, "similar to image ref.jpg"), atomically: a
    temporary file in the same folder, then a hard link (which fails when the name exists) or, with ``overwrite``, a
    rename.

    Raises:
        FileExistsError: the file exists and ``overwrite`` is False.
        ExportError: the folder is missing, is a file or is not writable; the disk is full ...
    """
    target = Path(path)
    check_writable(target, overwrite=overwrite)  # missing folder, a file as parent, an existing file
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for t in tables:
        for v in t.views:
            w.writerow([t.source, t.target, t.label, v.key, _num(v.deletion_auc), _num(v.insertion_auc), "", "",
                        t.steps, t.baseline, ""])
        rd, ri = t.random_deletion, t.random_insertion
        w.writerow([t.source, t.target, t.label, "random", _num(rd.auc_mean), _num(ri.auc_mean), _num(rd.auc_std),
                    _num(ri.auc_std), t.steps, t.baseline, rd.seeds])
    if len(tables) > 1:
        for k, (d, i, sd, si) in mean_over_images(tables).items():
            w.writerow(["mean", "", "", k, _num(d), _num(i), _num(sd) if k == "random" else "",
                        _num(si) if k == "random" else "", tables[0].steps, tables[0].baseline,
                        tables[0].random_deletion.seeds if k == "random" else ""])
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
