"""The parts of a sharded batch run and the check that they cover every image exactly once. Standard library only.

A shard of ``vitviz export``, ``vitviz stats`` or ``vitviz evaluate`` (``--shard K/N`` or a launcher's variables:
:mod:`vitviz.batch.launcher`) writes its own part, named ``<stem>-K-of-N<suffix>`` (:func:`part_name`), with its
:class:`ShardPlan`: the images of its share, each with its place in the whole input list, and a digest of that list.
``vitviz merge`` reads the parts back (:mod:`vitviz.batch.merge`) and :func:`check_coverage` says what stops a merge:
a shard without a part, an image its shard has not done, an image done by two shards (two splits of one folder, or
shards given other inputs). The merged files list the images in the order of the input list, as one run does.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vitviz.batch.inputs import InputImage, take_shard
from vitviz.imaging import remove_dead_temporaries, write_atomic

PART_FORMAT = 1
_PART = re.compile(r"(?P<stem>.+?)-(?P<k>\d+)-of-(?P<n>\d+)(?P<suffix>\..+)")
NAMES_SHOWN = 10  # images named in a message, then "... and N more"


class PartError(ValueError):
    """A part of a sharded run that cannot be read or is not one (the message names the file and the cause)."""


def part_name(stem: str, shard: tuple[int, int], suffix: str) -> str:
    """``<stem>-K-of-N<suffix>``, e.g. ``attention_stats-3-of-8.npz``."""
    k, n = shard
    return f"{stem}-{k}-of-{n}{suffix}"


def parse_part_name(name: str) -> tuple[str, tuple[int, int], str] | None:
    """``(stem, (K, N), suffix)`` of a part's file name, or None when it is not one."""
    m = _PART.fullmatch(name)
    if not m:
        return None
    k, n = int(m["k"]), int(m["n"])
    return (m["stem"], (k, n), m["suffix"]) if 1 <= k <= n else None


def inputs_digest(images: Sequence[InputImage]) -> str:
    """SHA-256 of the output names of the whole input list, in order: two shards given the same inputs agree."""
    h = hashlib.sha256()
    for im in images:
        h.update(im.rel.encode("utf-8") + b"\n")
    return h.hexdigest()


@dataclass(frozen=True)
class ShardPlan:
    """What one shard was given.

    Attributes:
        command: ``"export"``, ``"stats"`` or ``"evaluate"``.
        shard: ``(K, N)``.
        inputs: images in the whole input list (all shards).
        digest: :func:`inputs_digest` of the whole list.
        images: ``(index in the whole list, source path, output name)`` of this shard's images, in order.
        origin: where the shard came from (``--shard``, ``torchrun (RANK=3, WORLD_SIZE=8)`` ...).
    """

    command: str
    shard: tuple[int, int]
    inputs: int
    digest: str
    images: tuple[tuple[int, str, str], ...]
    origin: str = "--shard"

    def to_json(self) -> dict[str, Any]:
        return {"format": PART_FORMAT, "command": self.command, "shard": list(self.shard), "inputs": self.inputs,
                "digest": self.digest, "origin": self.origin, "images": [list(t) for t in self.images]}

    @classmethod
    def from_json(cls, value: Any, where: str | Path) -> ShardPlan:
        """The plan a part holds (:meth:`to_json`).

        Raises:
            PartError: naming ``where`` when it is not a plan.
        """
        try:
            if not isinstance(value, dict) or value.get("format") != PART_FORMAT:
                raise ValueError("not the plan of a shard of this vitviz")
            k, n = (int(x) for x in value["shard"])
            images = tuple((int(i), str(src), str(rel)) for i, src, rel in value["images"])
            if not 1 <= k <= n:
                raise ValueError(f"shard {k}/{n}")
            return cls(command=str(value["command"]), shard=(k, n), inputs=int(value["inputs"]),
                       digest=str(value["digest"]), images=images, origin=str(value.get("origin", "")))
        except (KeyError, TypeError, ValueError) as e:
            raise PartError(f"{where}: not the plan of a shard written by vitviz ({e})") from None

    @property
    def label(self) -> str:
        return f"shard {self.shard[0]}/{self.shard[1]}"


def plan_shard(command: str, images: Sequence[InputImage], shard: tuple[int, int], origin: str = "--shard"
               ) -> ShardPlan:
    """The plan of shard ``(K, N)`` of ``images`` (the whole input list)."""
    k, n = shard
    index = {im.rel: i for i, im in enumerate(images)}
    mine = take_shard(images, k, n)
    return ShardPlan(command, (k, n), len(images), inputs_digest(images),
                     tuple((index[im.rel], im.path, im.rel) for im in mine), origin)


def write_json(path: Path, value: Any) -> Path:
    """``value`` as JSON in ``path``, atomically, replacing it (a part is the shard's own file)."""
    data = (json.dumps(value, ensure_ascii=False) + "\n").encode("utf-8")
    remove_dead_temporaries(path, ".json.tmp")
    return write_atomic(path, lambda fh: fh.write(data), overwrite=True, suffix=".json.tmp")


def read_json(path: Path) -> Any:
    """The JSON value of a part's file.

    Raises:
        PartError: it cannot be read or is not JSON (naming the file).
    """
    try:
        return json.loads(path.read_bytes().decode("utf-8"))
    except OSError as e:
        raise PartError(f"{path}: cannot read ({e.strerror or e})") from None
    except (UnicodeDecodeError, ValueError) as e:
        raise PartError(f"{path}: not a part written by vitviz (not JSON: {e})") from None


@dataclass
class ShardResult:
    """What one shard's part says about its images.

    Attributes:
        plan: the shard's plan.
        path: the part (for messages).
        done: output name -> the image's result (a manifest record, a table ...), for each image of the plan that
            the shard finished, failed ones included (a single run reports those too).
        failed: output name -> why, for the images that failed.
    """

    plan: ShardPlan
    path: Path
    done: dict[str, Any] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)


@dataclass
class Coverage:
    """What :func:`check_coverage` found: ``problems`` (each a line; none when the parts can be merged) and the
    merged order: ``(output name, its shard's result)`` in the order of the input list; ``shards``: N (0 when the
    parts are of several splits); ``images``: in the whole input list."""

    problems: list[str] = field(default_factory=list)
    order: list[tuple[str, ShardResult]] = field(default_factory=list)
    shards: int = 0
    images: int = 0

    def describe(self, parts: int, done: int, verb: str) -> str:
        """``3 part(s) of 4 shard(s), 700 of 1000 image(s) done``."""
        if not self.shards:
            return f"{parts} part(s) of several splits"
        return f"{parts} part(s) of {self.shards} shard(s), {done} of {self.images} image(s) {verb}"

    @property
    def failures(self) -> list[tuple[str, str]]:
        """``(source, why)`` of the images that failed, in input order."""
        source = {rel: src for _, r in self.order for _, src, rel in r.plan.images}
        return [(source[rel], r.failed[rel]) for rel, r in self.order if rel in r.failed]


def names(items: Sequence[str], shown: int = NAMES_SHOWN) -> str:
    """``a, b, c`` (at most ``shown`` of them, then ``... and N more``)."""
    head = ", ".join(items[:shown])
    return head + (f" ... and {len(items) - shown} more" if len(items) > shown else "")


def check_coverage(results: Sequence[ShardResult], part_of: Callable[[tuple[int, int]], str]) -> Coverage:
    """Whether ``results`` (the parts found in one folder) cover every image exactly once.

    Args:
        results: one per part found.
        part_of: the file name of a shard's part (for the message naming a missing one).
    """
    cov = Coverage()
    splits = sorted({r.plan.shard[1] for r in results})
    if not splits:
        return cov
    source = {rel: src for r in results for _, src, rel in r.plan.images}
    if len(splits) > 1:
        where: dict[str, list[str]] = {}
        for r in results:
            for rel in r.done:
                where.setdefault(rel, []).append(r.plan.label)
        twice = [f"{source[rel]} ({' and '.join(s)})" for rel, s in sorted(where.items()) if len(s) > 1]
        listing = "; ".join(f"{n} shards: " + ", ".join(r.path.name for r in results if r.plan.shard[1] == n)
                            for n in splits)
        cov.problems.append(f"parts of {len(splits)} splits of the images ({listing}): delete the parts of the split "
                            "you do not want" + (f"; {len(twice)} image(s) done twice: {names(twice)}" if twice
                                                 else ""))
        return cov
    n = splits[0]
    cov.shards = n
    by_k: dict[int, ShardResult] = {}
    for r in results:
        by_k[r.plan.shard[0]] = r
    missing = n - len(by_k)  # (N may be a launcher's huge WORLD_SIZE: the shards are never listed one by one)
    first = []
    k = 0
    while len(first) < min(missing, NAMES_SHOWN):
        k += 1
        if k not in by_k:
            first.append(k)
    if 0 < missing <= NAMES_SHOWN:
        for k in first:
            cov.problems.append(f"shard {k}/{n} is missing: no {part_of((k, n))} (run it: --shard {k}/{n}, which is "
                                f"torchrun's RANK={k - 1} and the job array's task {k} of {n})")
    elif missing:
        shown = ", ".join(f"{k}/{n}" for k in first)
        cov.problems.append(f"{missing} of {n} shards are missing (no part, e.g. {part_of((first[0], n))}): {shown} "
                            f"... and {missing - len(first)} more (run each: --shard K/{n}, which is torchrun's "
                            "RANK=K-1 and the job array's task K)")
    ref = by_k[min(by_k)].plan
    for _, r in sorted(by_k.items()):
        p = r.plan
        if (p.inputs, p.digest) != (ref.inputs, ref.digest):
            cov.problems.append(f"{p.label} was given other inputs than {ref.label} ({p.inputs} image(s), not "
                                f"{ref.inputs}, or other names): run every shard on the same inputs")
    owner: dict[str, list[ShardResult]] = {}
    for r in by_k.values():
        for _, _, rel in r.plan.images:
            owner.setdefault(rel, []).append(r)
    twice = [f"{source[rel]} ({' and '.join(r.plan.label for r in rs)})" for rel, rs in owner.items() if len(rs) > 1]
    if twice:
        cov.problems.append(f"{len(twice)} image(s) in two shards: {names(twice)}")
    for k, r in sorted(by_k.items()):
        todo = [src for _, src, rel in r.plan.images if rel not in r.done]
        if todo:
            cov.problems.append(f"{r.plan.label}: {len(todo)} of {len(r.plan.images)} image(s) not done "
                                f"({names(todo)}): run shard {k}/{n} again (it skips the images done)")
    every = sorted(((i, rel, r) for r in by_k.values() for i, _, rel in r.plan.images), key=lambda t: t[:2])
    cov.order = [(rel, r) for _, rel, r in every if rel in r.done]
    cov.images = max([len(every)] + [r.plan.inputs for r in by_k.values()])
    return cov
