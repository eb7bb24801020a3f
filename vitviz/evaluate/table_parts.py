"""The part a shard of ``vitviz evaluate`` writes, and reads back for ``vitviz merge``: each image's faithfulness
table as the CSV and the mean over the images need it (the AUCs exactly: JSON keeps every bit of a float), the
shard's plan and the images that failed. Standard library and numpy.

A shard given ``--csv DIR/NAME.csv`` writes ``DIR/NAME-K-of-N.evaluate.json`` (:func:`part_path`); ``vitviz merge
DIR`` joins the parts into ``DIR/NAME.csv`` and prints the mean over the images, as one run over all of them does.
The curves themselves (scores per step) and the maps are not kept: the CSV and the mean read only the areas (and
the localisation scores, with their reasons).
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from vitviz.evaluate.outcomes import FaithfulnessTable, LocalisationScores, PerturbationCurve, RandomBaseline, ViewScore
from vitviz.imaging import remove_dead_temporaries, write_atomic

PART_SUFFIX = ".evaluate.json"
_KIND = "vitviz evaluate part"
_NAME = re.compile(r"(?P<stem>.+?)-(?P<k>\d+)-of-(?P<n>\d+)" + re.escape(PART_SUFFIX))
_EMPTY = np.zeros(0)


class TablePartError(ValueError):
    """A file that is not the part of a ``vitviz evaluate`` shard (the message names it and the cause)."""


def part_path(csv: str | os.PathLike, shard: tuple[int, int]) -> Path:
    """Where shard ``(K, N)`` of an evaluation whose CSV is ``csv`` writes its part: ``NAME-K-of-N.evaluate.json``
    beside it."""
    p = Path(csv)
    return p.with_name(f"{p.stem}-{shard[0]}-of-{shard[1]}{PART_SUFFIX}")


def find_parts(folder: str | os.PathLike) -> dict[str, dict[tuple[int, int], Path]]:
    """The parts in ``folder``: the CSV's stem -> ``(K, N)`` -> the part."""
    out: dict[str, dict[tuple[int, int], Path]] = {}
    for p in sorted(Path(folder).glob(f"*-of-*{PART_SUFFIX}")):
        m = _NAME.fullmatch(p.name)
        if m and p.is_file() and 1 <= int(m["k"]) <= int(m["n"]):
            out.setdefault(m["stem"], {})[(int(m["k"]), int(m["n"]))] = p
    return out


def _num(x: Any) -> float | None:
    return None if x is None else float(x)


def _localisation_json(s: LocalisationScores | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {"values": {k: None if math.isnan(v) else float(v) for k, v in s.values.items()}, "reasons": s.reasons}


def _localisation_from_json(d: dict[str, Any] | None) -> LocalisationScores | None:
    if d is None:
        return None
    return LocalisationScores({str(k): math.nan if v is None else float(v) for k, v in d["values"].items()},
                              {str(k): str(v) for k, v in d["reasons"].items()})


def table_json(t: FaithfulnessTable) -> dict[str, Any]:
    """What the CSV and the mean read of one image's table (the localisation scores exactly, NaN as null)."""
    rnd = None if not t.has_curves else {"seed": int(t.random_deletion.seed),
                                         "deletion": [float(x) for x in t.random_deletion.aucs],
                                         "insertion": [float(x) for x in t.random_insertion.aucs]}
    return {"source": t.source, "target": None if t.target is None else int(t.target), "label": t.label,
            "probability": float(t.probability), "measure": t.measure, "steps": int(t.steps), "baseline": t.baseline,
            "views": [{"key": v.key, "title": v.title, "unavailable": v.unavailable,
                       "deletion_auc": None if v.deletion is None else float(v.deletion.auc),
                       "insertion_auc": None if v.insertion is None else float(v.insertion.auc),
                       "localisation": _localisation_json(v.localisation)} for v in t.views],
            "random": rnd, "ground_truth": t.ground_truth}


def _curve(mode: str, baseline: str, target: int, auc: float | None) -> PerturbationCurve | None:
    return None if auc is None else PerturbationCurve(mode, baseline, target, _EMPTY, _EMPTY, _EMPTY, auc)


def table_from_json(d: dict[str, Any]) -> FaithfulnessTable:
    """The table :func:`table_json` wrote (its curves hold only their areas). KeyError, TypeError or ValueError
    when ``d`` is not one."""
    target, baseline = None if d["target"] is None else int(d["target"]), str(d["baseline"])
    views = [ViewScore(str(v["key"]), str(v["title"]), None,
                       _curve("deletion", baseline, target, _num(v["deletion_auc"])),
                       _curve("insertion", baseline, target, _num(v["insertion_auc"])),
                       v.get("unavailable"), _localisation_from_json(v.get("localisation"))) for v in d["views"]]
    rnd = d["random"]

    def random(mode: str) -> RandomBaseline:
        aucs = np.array([float(x) for x in rnd[mode]], np.float64)
        if not aucs.size:
            raise ValueError("a random baseline without rankings")
        return RandomBaseline(mode, baseline, target, _EMPTY, np.zeros((aucs.size, 0)), aucs, _EMPTY,
                              int(rnd["seed"]))

    gt = d.get("ground_truth")
    return FaithfulnessTable(source=str(d["source"]), target=target, label=str(d["label"]),
                             probability=float(d["probability"]), steps=int(d["steps"]), baseline=baseline,
                             views=views, random_deletion=None if rnd is None else random("deletion"),
                             random_insertion=None if rnd is None else random("insertion"),
                             measure=str(d.get("measure", "probability")), ground_truth=None if gt is None else str(gt))


@dataclass
class TablePart:
    """What a shard of ``vitviz evaluate`` wrote: its plan (:meth:`vitviz.batch.parts.ShardPlan.to_json`), the CSV
    file the merge writes (its name), the tables of its images, the images that failed ``(source, why)`` and the
    settings (views, steps, baseline, seeds, target, the model by content)."""

    plan: dict[str, Any]
    csv: str
    tables: list[FaithfulnessTable] = field(default_factory=list)
    failures: list[tuple[str, str]] = field(default_factory=list)
    settings: dict[str, Any] = field(default_factory=dict)


def write_part(path: str | os.PathLike, part: TablePart, *, overwrite: bool = False) -> Path:
    """Write a shard's :class:`TablePart` as JSON, atomically (an existing part only with ``overwrite``)."""
    value = {"kind": _KIND, "plan": part.plan, "csv": part.csv, "settings": part.settings,
             "tables": [table_json(t) for t in part.tables], "failures": [list(f) for f in part.failures]}
    data = (json.dumps(value, ensure_ascii=False) + "\n").encode("utf-8")
    target = Path(path)
    remove_dead_temporaries(target, ".json.tmp")
    return write_atomic(target, lambda fh: fh.write(data), overwrite=overwrite, suffix=".json.tmp",
                        exists_message=f"{target} already exists (pass --overwrite to replace it)")


def read_part(path: str | os.PathLike) -> TablePart:
    """The :class:`TablePart` of a shard.

    Raises:
        TablePartError: naming the file when it cannot be read or is not such a part.
    """
    p = Path(path)
    try:
        value = json.loads(p.read_bytes().decode("utf-8"))
    except OSError as e:
        raise TablePartError(f"{p}: cannot read ({e.strerror or e})") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise TablePartError(f"{p}: not a part of vitviz evaluate (not JSON: {e})") from None
    try:
        if not isinstance(value, dict) or value.get("kind") != _KIND:
            raise ValueError("no description of a vitviz evaluate shard")
        csv = str(value["csv"])
        if not csv or Path(csv).name != csv:
            raise ValueError(f"csv {csv!r}")
        tables = [table_from_json(t) for t in value["tables"]]
        failures = [(str(a), str(b)) for a, b in value["failures"]]
        settings = value.get("settings") or {}
        if not isinstance(value["plan"], dict) or not isinstance(settings, dict):
            raise ValueError("plan or settings")
    except (KeyError, TypeError, ValueError) as e:
        raise TablePartError(f"{p}: not a complete part of vitviz evaluate ({type(e).__name__}: {e})") from None
    return TablePart(value["plan"], csv, tables, failures, settings)
