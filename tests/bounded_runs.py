"""What the bad-input corpora share: a call that must end in time (:func:`bounded`), a ``vitviz`` command's status
and output (:func:`cli`), and every file under a folder (:func:`snapshot`, to show that a refused command touched
nothing)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vitviz.cli import main


def bounded(fn: Callable[[], Any], timeout: float, name: str = "corpus-case") -> dict[str, Any]:
    """``fn()`` in a thread that must end within ``timeout`` seconds (no hang): ``{"value": ...}`` or
    ``{"error": the exception}``, and ``"seconds"``."""
    out: dict[str, Any] = {}

    def run():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - the case's outcome, checked by the caller
            out["error"] = e

    t = threading.Thread(target=run, daemon=True, name=name)
    t0 = time.perf_counter()
    t.start()
    t.join(timeout)
    out["seconds"] = time.perf_counter() - t0
    assert not t.is_alive(), f"still running after {timeout} s"
    return out


def cli(argv: list[str], capsys, timeout: float | None = None) -> tuple[int, list[str], str]:
    """``(exit status, stderr lines, stdout)`` of ``vitviz ARGV`` (argparse's own exits included); with ``timeout``,
    in a thread that must end within that many seconds."""
    capsys.readouterr()
    if timeout is None:
        try:
            status = main(argv)
        except SystemExit as e:  # argparse's own errors
            status = e.code
    else:
        done = bounded(lambda: main(argv), timeout, name="corpus-cli")
        error = done.get("error")
        if error is not None and not isinstance(error, SystemExit):
            raise error
        status = int(error.code if error is not None else done["value"])
    got = capsys.readouterr()
    return status, [x for x in got.err.splitlines() if x.strip()], got.out


def snapshot(root: Path) -> dict[str, tuple[bytes, int] | None]:
    """Every file (bytes, mtime) and folder under ``root``, hidden ones included (a link or a FIFO by name only:
    reading a FIFO would block)."""
    out: dict[str, tuple[bytes, int] | None] = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        out[rel] = (p.read_bytes(), p.stat().st_mtime_ns) if p.is_file() and not p.is_symlink() else None
    return out
