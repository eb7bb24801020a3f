"""The manifest of ``vitviz export``: one JSON line per image (``manifest.jsonl``, ``manifest-K-of-N.jsonl`` for a
shard, with the shard's plan beside it in ``manifest-K-of-N.plan.json``: :mod:`vitviz.batch.parts`, which
``vitviz merge`` reads), a ``run`` line at the start of each run (what the files were made with: the settings, the
model's content hash), the hidden journal of the files being written, and what a rerun reads back from them.
Standard library only.

Lines are checked as they are read: an image record is an object with ``source``, ``status``, ``request`` and
``files``; a run line an object ``{"run": {"request", "settings", ...}}``. A last line without its line break was cut
short by a crash (:func:`set_aside_tail` moves it into ``manifest.jsonl.cut-line-<n>`` before anything is appended,
so no record is ever written onto a damaged line; the files it still names are the export's to replace, and its image
is done again); any other line that is not one of these was changed by hand, and :class:`ManifestError` names the file
and the line.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MANIFEST = "manifest.jsonl"
_NAME = re.compile(r"manifest(-\d+-of-\d+)?\.jsonl")


class ManifestError(ValueError):
    """A manifest that cannot be read, or a line of it that no run of vitviz export wrote (the message names the
    file, the line and what is wrong)."""


def manifest_name(shard: tuple[int, int]) -> str:
    """The manifest's file name for shard ``(K, N)`` (``manifest.jsonl`` when there is one shard)."""
    k, n = shard
    return MANIFEST if n == 1 else f"manifest-{k}-of-{n}.jsonl"


def plan_name(shard: tuple[int, int]) -> str:
    """The file name of shard ``(K, N)``'s plan (:class:`vitviz.batch.parts.ShardPlan`): ``manifest-K-of-N.plan.json``
    (written by a shard only)."""
    k, n = shard
    return f"manifest-{k}-of-{n}.plan.json"


def journal_path(out: Path, name: str) -> Path:
    """The hidden journal beside the manifest ``name``: the files of the image being written."""
    return out / f".{name}.pending"


def line_problem(line: bytes) -> tuple[str, dict[str, Any] | None]:
    """``(kind, value)`` of one manifest line: ``("record", rec)``, ``("run", run)``, ``("blank", None)``, or
    ``(why, None)`` when it is neither (``why`` in words: not UTF-8, not JSON, not a record)."""
    if not line.strip():
        return "blank", None
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return "not UTF-8 text", None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        return f"not JSON (column {e.colno}: {e.msg[:1].lower() + e.msg[1:]})", None
    if isinstance(value, dict) and isinstance(value.get("run"), dict):
        run = value["run"]
        if isinstance(run.get("request"), str) and isinstance(run.get("settings"), dict):
            return "run", run
    elif (isinstance(value, dict) and isinstance(value.get("source"), str) and isinstance(value.get("status"), str)
          and isinstance(value.get("request"), str) and isinstance(value.get("files"), list)
          and all(isinstance(f, str) for f in value["files"])):
        outside = [f for f in value["files"] if not _relative_ok(f)]
        if outside:
            return f"names a file outside the output folder ({outside[0]})", None
        return "record", value
    return "not a line of vitviz export (an image's record has source, status, request and files)", None


def _relative_ok(rel: str) -> bool:
    """A file name a record may give: relative, inside the output folder."""
    p = Path(rel)
    return bool(rel) and not p.is_absolute() and ".." not in p.parts


@dataclass
class FolderManifests:
    """What every manifest and journal of an output folder says (:func:`read_folder`).

    Attributes:
        records: the latest record of each source (by :func:`source_key`), over all manifests.
        ours: every file a record or a journal names (relative to the folder): the files this tool wrote, which a
            rerun may replace.
        runs: ``(manifest, run)`` of every run line, in the order read.
        legacy: manifests with records but no run line (written before vitviz recorded what made its maps).
        damaged: ``(manifest, line number, why)`` of lines that are no line of vitviz export.
        cut: manifest -> the number of its last line, cut short (no line break and not a whole line).
    """

    records: dict[str, dict] = field(default_factory=dict)
    ours: set[str] = field(default_factory=set)
    runs: list[tuple[Path, dict]] = field(default_factory=list)
    legacy: list[Path] = field(default_factory=list)
    damaged: list[tuple[Path, int, str]] = field(default_factory=list)
    cut: dict[Path, int] = field(default_factory=dict)

    def latest_run(self) -> tuple[Path, dict] | None:
        """The run line that started last (by its ``time``; the last read on a tie), or None."""
        if not self.runs:
            return None
        order = {id(r): i for i, r in enumerate(self.runs)}
        return max(self.runs, key=lambda r: (_number(r[1].get("time")), order[id(r)]))


def _number(x: Any) -> float:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else float("-inf")


def read_lines(path: Path) -> tuple[list[bytes], bool]:
    """The lines of a JSON-lines file and whether its last line lacks its line break.

    Raises:
        ManifestError: it cannot be read (a folder of that name, no permission ...).
    """
    try:
        data = path.read_bytes()
    except IsADirectoryError:
        raise ManifestError(f"{path}: a folder of that name exists (vitviz export keeps its manifest there)") from None
    except OSError as e:
        raise ManifestError(f"{path}: cannot read the manifest ({e.strerror or e})") from None
    lines = data.split(b"\n")
    unterminated = lines[-1] != b""
    if not unterminated:
        lines.pop()
    return lines, unterminated


def read_folder(out: Path) -> FolderManifests:
    """Read every ``manifest*.jsonl`` (all shards) and hidden journal of ``out`` (see :class:`FolderManifests`).

    Raises:
        ManifestError: a manifest cannot be read.
    """
    state = FolderManifests()
    manifests = sorted(p for p in out.glob("manifest*.jsonl") if _NAME.fullmatch(p.name))
    for path in manifests:
        lines, unterminated = read_lines(path)
        has_records = has_run = False
        for i, line in enumerate(lines, 1):
            kind, value = line_problem(line)
            if kind == "blank":
                continue
            if value is None:
                if unterminated and i == len(lines):
                    state.cut[path] = i
                    state.ours.update(cut_record_files(line, out))
                else:
                    state.damaged.append((path, i, kind))
                continue
            if kind == "run":
                state.runs.append((path, value))
                has_run = True
                continue
            has_records = True
            state.ours.update(value["files"])
            state.records[source_key(value["source"])] = value
        if has_records and not has_run:
            state.legacy.append(path)
    for path in sorted(out.glob(".manifest*.jsonl.pending")):
        state.ours.update(journal_files(path))
    return state


_STRING = re.compile(rb'"((?:[^"\\]|\\.)*)"')
_EXPORT_SUFFIXES = (".npy", ".png", ".gif", ".apng", ".mp4")


def cut_record_files(line: bytes, out: Path) -> set[str]:
    """The files of the image whose record ``line`` was cut short by a crash (the files are written before their
    record, so they exist, but no whole line names them): every relative name the cut text still gives, and the
    files beside them named ``<output>_...`` with an export's suffix (a record starts with its ``output`` and
    ``files``, so the cut text names them unless the line was cut in its first few bytes; then the journal, which
    a crash leaves, names them). A rerun may replace exactly these, as it may the files of whole records."""
    strings: list[str] = []
    for m in _STRING.finditer(line):
        try:
            strings.append(json.loads(b'"' + m.group(1) + b'"'))
        except ValueError:
            continue
    files = {x for x in strings if _relative_ok(x) and (out / x).is_file()}
    if "output" in strings[:-1]:
        rel = strings[strings.index("output") + 1]
        if _relative_ok(rel):
            folder, stem = (out / rel).parent, Path(rel).name + "_"
            try:
                entries = list(folder.iterdir())
            except OSError:
                entries = []
            files |= {str(f.relative_to(out)) for f in entries
                      if f.name.startswith(stem) and f.name.endswith(_EXPORT_SUFFIXES) and f.is_file()}
    return files


def set_aside_tail(path: Path) -> tuple[int, Path] | None:
    """:func:`repair_tail`, keeping the line cut short: its bytes are written first to ``<name>.cut-line-<n>`` beside
    it (``.cut-line-<n>-2`` ... when that exists). Returns ``(line number, the file kept)``, or None when the last
    line was whole."""
    try:
        data = path.read_bytes()
    except OSError:
        return None
    if not data or data.endswith(b"\n"):
        return None
    start = data.rfind(b"\n") + 1
    if line_problem(data[start:])[1] is not None or not data[start:].strip():
        repair_tail(path)  # a whole last line: only its line break is added
        return None
    number = data.count(b"\n", 0, start) + 1
    aside = path.with_name(f"{path.name}.cut-line-{number}")
    k = 1
    while aside.exists() or aside.is_symlink():
        k += 1
        aside = path.with_name(f"{path.name}.cut-line-{number}-{k}")
    with open(aside, "xb") as f:
        f.write(data[start:])
        f.flush()
        os.fsync(f.fileno())
    repair_tail(path)
    return number, aside


def journal_files(path: Path) -> set[str]:
    """The files a journal names (damaged lines, such as one cut by a kill, are skipped: it is hidden and ours)."""
    try:
        lines, _ = read_lines(path)
    except ManifestError:
        return set()
    files: set[str] = set()
    for line in lines:
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and isinstance(value.get("files"), list):
            files.update(f for f in value["files"] if isinstance(f, str) and _relative_ok(f))
    return files


def repair_tail(path: Path) -> int | None:
    """Make ``path`` end with a whole line before anything is appended to it (else the next record would be written
    onto a damaged line and lost): a last line cut short is removed (the file truncated back to the end of the line
    before it), a whole last line without its line break gets one. Returns the number of the line removed, or None.
    A missing file is left alone."""
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return None
    try:
        size = os.fstat(fd).st_size
        if size == 0 or os.pread(fd, 1, size - 1) == b"\n":
            return None
        data = os.pread(fd, size, 0)
        start = data.rfind(b"\n") + 1
        kind, value = line_problem(data[start:])
        if value is not None or kind == "blank":
            os.lseek(fd, 0, os.SEEK_END)
            os.write(fd, b"\n")
            return None
        os.ftruncate(fd, start)
        os.fsync(fd)
        return data.count(b"\n", 0, start) + 1
    finally:
        os.close(fd)


def drop_lines(path: Path, numbers: set[int]) -> None:
    """Rewrite ``path`` without the lines ``numbers`` (1-based) and a last line cut short, atomically (a temporary
    file renamed over it)."""
    lines, unterminated = read_lines(path)
    if unterminated and line_problem(lines[-1])[1] is None:
        numbers = numbers | {len(lines)}
    kept = [line for i, line in enumerate(lines, 1) if i not in numbers]
    data = b"".join(line + b"\n" for line in kept)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def source_key(source: str) -> str:
    """The key of an image in :class:`FolderManifests`: its absolute, normalised path."""
    return os.path.normpath(os.path.abspath(source))


def is_complete(record: dict | None, request_id: str, out: Path) -> bool:
    """A manifest record of an image finished for this request, whose files all exist."""
    return (record is not None and record.get("status") == "ok" and record.get("request") == request_id
            and all((out / f).is_file() for f in record.get("files", [])))


def request_id(request: dict[str, Any]) -> str:
    """A short hash of a request (the settings the files depend on, the model's content hash among them): the
    ``request`` of the manifest's lines."""
    return hashlib.sha1(json.dumps(request, sort_keys=True).encode()).hexdigest()[:12]


class Appender:
    """A JSON-lines file appended one whole line per ``os.write`` (a kill cannot interleave two records), flushed to
    the system at once. The caller repairs a damaged tail first (:func:`repair_tail`)."""

    def __init__(self, path: Path):
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)

    def write(self, record: dict) -> None:
        """Append ``record`` as one line; a write that fails part-way (a full disk) is undone, so that no line is
        left cut short for the next record to be written onto."""
        data = memoryview((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
        size = os.fstat(self.fd).st_size
        try:
            while data:
                data = data[os.write(self.fd, data):]
        except BaseException as e:
            try:
                os.ftruncate(self.fd, size)
            except OSError:
                pass
            if isinstance(e, OSError):
                raise OSError(f"cannot write {self.path}: {e.strerror or e}") from e
            raise

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


def read_manifest(path: str | os.PathLike) -> list[dict]:
    """The image records of one manifest, in order (its run lines and blank lines left out; so is a last line cut
    short by a crash).

    Raises:
        ManifestError: the file cannot be read, or a line is no line of vitviz export (naming the line).
    """
    p = Path(path)
    lines, unterminated = read_lines(p)
    out = []
    for i, line in enumerate(lines, 1):
        kind, value = line_problem(line)
        if kind == "record":
            out.append(value)
        elif value is None and kind != "blank" and not (unterminated and i == len(lines)):
            raise ManifestError(f"{p} line {i}: {kind}")
    return out
