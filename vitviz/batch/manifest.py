"""The manifest of ``vitviz export``: one JSON line per image (``manifest.jsonl``, ``manifest-K-of-N.jsonl`` for a
shard), the hidden journal of the files being written, and what a rerun reads back from them (which images are
complete for the same request, which files this tool wrote). Standard library only."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

MANIFEST = "manifest.jsonl"


def manifest_name(shard: tuple[int, int]) -> str:
    """The manifest's file name for shard ``(K, N)`` (``manifest.jsonl`` when there is one shard)."""
    k, n = shard
    return MANIFEST if n == 1 else f"manifest-{k}-of-{n}.jsonl"


def journal_path(out: Path, name: str) -> Path:
    """The hidden journal beside the manifest ``name``: the files of the image being written."""
    return out / f".{name}.pending"


def read_manifests(out: Path) -> tuple[dict[str, dict], set[str]]:
    """The latest record of each source in every ``manifest*.jsonl`` of ``out`` (all shards), and every file any
    record or pending journal names (relative to ``out``: the files this tool wrote, which a rerun may replace).
    A damaged line (a run killed while appending) is skipped."""
    records: dict[str, dict] = {}
    ours: set[str] = set()
    for path in sorted(out.glob("manifest*.jsonl")) + sorted(out.glob(".manifest*.jsonl.pending")):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if not isinstance(rec, dict):
                continue
            ours.update(str(f) for f in rec.get("files", []) if isinstance(f, str))
            if "source" in rec and not path.name.endswith(".pending"):
                records[source_key(str(rec["source"]))] = rec
    return records, ours


def source_key(source: str) -> str:
    """The key of an image in :func:`read_manifests`: its absolute, normalised path."""
    return os.path.normpath(os.path.abspath(source))


def is_complete(record: dict | None, request_id: str, out: Path) -> bool:
    """A manifest record of an image finished for this request, whose files all exist."""
    return (record is not None and record.get("status") == "ok" and record.get("request") == request_id
            and all((out / f).is_file() for f in record.get("files", [])))


def request_id(request: dict[str, Any]) -> str:
    """A short hash of a request (:meth:`~vitviz.batch.export_options.ExportOptions.request`): the manifest's
    ``request``."""
    return hashlib.sha1(json.dumps(request, sort_keys=True).encode()).hexdigest()[:12]


class Appender:
    """A JSON-lines file appended one whole line per ``os.write`` (a kill cannot interleave two records), flushed to
    the system at once."""

    def __init__(self, path: Path):
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)

    def write(self, record: dict) -> None:
        os.write(self.fd, (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def read_manifest(path: str | os.PathLike) -> list[dict]:
    """The records of one manifest, in order."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
