"""A ``vitviz`` command killed at a chosen point of its writing, for the kill-and-rerun tests: no sleeping, no race.

The command runs in a child process whose ``os.write`` (the manifest's and journals' appends) and ``os.fsync`` (every
atomic file, just before it is linked into place) count as events. :func:`count_events` runs the command once to
the end and returns how many events a whole run has; :func:`killed_at` runs it again and, at event ``n``, sends
itself ``SIGKILL`` or ``SIGINT``: SIGKILL in the middle of a write (half the bytes of an append written, or an atomic
file's temporary written but not linked), SIGINT just before the write (the run then finishes what it was writing
and stops, as Ctrl+C does). The same ``n`` kills at the same point on every machine, however busy.
:func:`stopped_when` stops a run (SIGSTOP) at its first write after a file exists (an export holding its folder's
lock), for a test to act then.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from repo_paths import REPO

CHILD_TIMEOUT_S = 300  # a bound against a hang, not a speed

_CHILD = r"""
import os, signal, sys, threading
at, how, count_to = int(os.environ["KILL_AT"]), os.environ["KILL_HOW"], os.environ.get("KILL_COUNT_TO")
seen, lock = [0], threading.Lock()
real_write, real_fsync = os.write, os.fsync


def reached(path, lines):
    try:
        with open(path, "rb") as f:
            return f.read().count(b"\n") >= lines
    except OSError:
        return False


def now():
    with lock:
        seen[0] += 1
        if how == "STOP" and reached(os.environ["STOP_WHEN"], int(os.environ["STOP_LINES"])):
            os.environ["STOP_WHEN"] = "/nonexistent/stopped"  # stopped once, where the parent said
            os.kill(os.getpid(), signal.SIGSTOP)
        return seen[0] == at


def write(fd, data):
    if now():
        if how == "KILL":
            real_write(fd, bytes(data[:max(1, len(data) // 2)]))
            os.kill(os.getpid(), signal.SIGKILL)
        os.kill(os.getpid(), signal.SIGINT)
    return real_write(fd, data)


def fsync(fd):
    if now():
        os.kill(os.getpid(), signal.SIGKILL if how == "KILL" else signal.SIGINT)
    return real_fsync(fd)


os.write, os.fsync = write, fsync
from vitviz.cli import main
status = main(sys.argv[1:])
if count_to:
    with open(count_to, "w") as f:
        f.write(str(seen[0]))
sys.exit(status)
"""


def _run(argv: list[str], at: int, how: str, count_to: Path | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "KILL_AT": str(at), "KILL_HOW": how, "QT_QPA_PLATFORM": "offscreen"}
    if count_to is not None:
        env["KILL_COUNT_TO"] = str(count_to)
    return subprocess.run([sys.executable, "-c", _CHILD, *argv], env=env, capture_output=True, text=True,
                          timeout=CHILD_TIMEOUT_S, check=False)


def stopped_when(argv: list[str], path: Path, lines: int = 0) -> subprocess.Popen:
    """``vitviz ARGV`` started in a child that stops itself (SIGSTOP) at its first write or sync after ``path``
    exists (with at least ``lines`` whole lines); returned once it is stopped (``waitpid`` with ``WUNTRACED``: no
    polling, no clock). The caller sends SIGCONT or SIGKILL and collects it (``communicate``)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "KILL_AT": "0", "KILL_HOW": "STOP", "STOP_WHEN": str(path),
           "STOP_LINES": str(lines), "QT_QPA_PLATFORM": "offscreen"}
    child = subprocess.Popen([sys.executable, "-c", _CHILD, *argv], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    _, status = os.waitpid(child.pid, os.WUNTRACED)
    if not os.WIFSTOPPED(status):  # it ended before it stopped: reaped here, so say how
        child.returncode = os.waitstatus_to_exitcode(status)
        raise AssertionError(f"vitviz {' '.join(argv)} ended ({child.returncode}) before it reached {path}: "
                             f"{child.stderr.read() if child.stderr else ''}")
    return child


def count_events(argv: list[str], scratch: Path) -> int:
    """The number of writes and syncs of a whole run of ``vitviz ARGV`` (which must succeed)."""
    count = scratch / "events.txt"
    done = _run(argv, 0, "none", count)
    assert done.returncode == 0, done.stderr
    return int(count.read_text())


def killed_at(argv: list[str], n: int, how: str) -> subprocess.CompletedProcess:
    """``vitviz ARGV`` killed at event ``n`` with ``how`` ("KILL" or "INT"); returns the finished process."""
    done = _run(argv, n, how)
    if how == "KILL":
        assert done.returncode == -signal.SIGKILL, (n, done.returncode, done.stderr)
    return done
