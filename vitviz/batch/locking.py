"""One ``vitviz export`` at a time per output folder and shard: a lock file created with ``O_EXCL``.

``.vitviz-export.lock`` (``.vitviz-export-K-of-N.lock`` for shard K of N) holds the owner's pid, host, process start
time and a random token, written whole before it appears (a temporary file hard-linked into place, which fails when
the name exists: atomic on local and network file systems). A second export of the same folder and shard stops at
once with :class:`ExportBusy`: "another vitviz export (pid N) is writing to FOLDER". Shards of one job array
(same N, other K) run side by side; a run of another split (another N, or no shard) is refused while any of them
runs, since their images overlap.

A lock whose owner is gone (its pid is not running on this host, or runs another program since: the start time
differs) is taken over with a note. A lock from another host cannot be checked from here: the message says which
host and how to remove it when that run is over.
"""

from __future__ import annotations

import errno
import json
import os
import secrets
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from vitviz._util.files import describe_os_error

LOCK_PREFIX = ".vitviz-export"
_HELD: set[str] = set()  # tokens of the locks this process holds (two exports in one process are two owners)
_HELD_LOCK = threading.Lock()


class ExportBusy(RuntimeError):
    """Another vitviz export is writing to the folder (the message names its pid, host and the lock file)."""


def lock_name(shard: tuple[int, int]) -> str:
    k, n = shard
    return f"{LOCK_PREFIX}.lock" if n == 1 else f"{LOCK_PREFIX}-{k}-of-{n}.lock"


def _start_time(pid: int) -> str | None:
    """The start time of process ``pid`` in clock ticks since boot (Linux ``/proc``), None where unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read().decode("ascii", "replace")
        return stat[stat.rindex(")") + 2:].split()[19]
    except (OSError, ValueError, IndexError):
        return None


def _running(info: dict[str, Any]) -> bool | None:
    """Whether the owner of a lock runs: True, False, or None when it cannot be told (another host)."""
    pid = info.get("pid")
    if info.get("host") != socket.gethostname():
        return None
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return False
    if pid == os.getpid():
        with _HELD_LOCK:
            return info.get("token") in _HELD
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        pass
    except OSError:
        return None
    started = info.get("started")
    return not (isinstance(started, str) and _start_time(pid) not in (None, started))


def _read(path: Path) -> dict[str, Any] | None:
    """A lock's content; None when it is gone; ``{}`` when it cannot be read as one."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return None
    except OSError:
        return {}
    try:
        info = json.loads(text)
    except ValueError:
        return {}
    return info if isinstance(info, dict) else {}


def _owner(info: dict[str, Any]) -> str:
    pid = info.get("pid", "?")
    host = info.get("host")
    return f"pid {pid}" + (f" on {host}" if host and host != socket.gethostname() else "")


class ExportLock:
    """The lock of one export on ``folder`` for ``shard`` (:meth:`acquire`, then :meth:`release`)."""

    def __init__(self, folder: Path, shard: tuple[int, int]):
        self.folder = Path(folder)
        self.shard = shard
        self.path = self.folder / lock_name(shard)
        self.info: dict[str, Any] = {"pid": os.getpid(), "host": socket.gethostname(),
                                     "started": _start_time(os.getpid()), "shard": list(shard),
                                     "since": time.strftime("%Y-%m-%d %H:%M:%S"), "token": secrets.token_hex(8)}
        self.held = False

    def _busy(self, info: dict[str, Any], path: Path) -> ExportBusy:
        if not info or "pid" not in info:
            return ExportBusy(f"{self.folder} is locked by {path}, which is not a lock vitviz export writes; if no "
                              f"vitviz export is writing to {self.folder}, delete it")
        how = "wait for it to finish, or choose another --out"
        if _running(info) is None:
            how += f"; if it no longer runs{' on ' + str(info['host']) if info.get('host') else ''}, delete {path}"
        return ExportBusy(f"another vitviz export ({_owner(info)}) is writing to {self.folder} (lock {path.name}, "
                          f"since {info.get('since', '?')}); {how}")

    def _create(self) -> bool:
        """Create the lock file whole, or return False when the name exists."""
        tmp = self.folder / f"{self.path.name}.{self.info['token']}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                data = json.dumps(self.info).encode()
                if os.write(fd, data) != len(data):
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            finally:
                os.close(fd)
        except OSError as e:  # a full disk, no inodes left, a read-only folder: the path and the cause, nothing left
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise OSError(f"cannot write the lock {self.path}: {describe_os_error(e)}") from None
        try:
            os.link(tmp, self.path)
            return True
        except FileExistsError:
            return False
        except OSError:  # no hard links here: O_EXCL on the name itself
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "wb") as f:
                f.write(json.dumps(self.info).encode())
            return True
        finally:
            os.unlink(tmp)

    def acquire(self, note: Callable[[str], None] = lambda _: None) -> "ExportLock":
        """Take the lock (``note`` gets a line when a lock left by a run that is gone is taken over).

        Raises:
            ExportBusy: another export of this folder and shard (or of an overlapping split) is running.
            OSError: the lock cannot be written.
        """
        for _ in range(20):
            if self._create():
                break
            try:
                before = os.stat(self.path)
            except FileNotFoundError:
                continue  # released meanwhile: try again
            info = _read(self.path)
            if info is None:
                continue
            if not info or _running(info) is not False:
                raise self._busy(info, self.path)
            try:  # stale: remove it unless another run took it over since it was read
                if os.stat(self.path).st_ino == before.st_ino:
                    os.unlink(self.path)
            except FileNotFoundError:
                pass
            note(f"took over the lock of an export that is gone ({_owner(info)}, since {info.get('since', '?')})")
        else:
            raise ExportBusy(f"could not take the lock {self.path} (other exports keep taking it)")
        with _HELD_LOCK:
            _HELD.add(self.info["token"])
        self.held = True
        try:
            self._check_other_splits()
        except BaseException:
            self.release()
            raise
        return self

    def _check_other_splits(self) -> None:
        """Refuse while an export of another split of this folder runs (its images overlap this one's)."""
        for other in sorted(self.folder.glob(f"{LOCK_PREFIX}*.lock")):
            if other == self.path:
                continue
            info = _read(other)
            if info is None:
                continue
            shard = info.get("shard")
            n = shard[1] if isinstance(shard, list) and len(shard) == 2 else None
            if (n != self.shard[1] or n == 1) and (not info or _running(info) is not False):
                raise self._busy(info, other)

    def release(self) -> None:
        """Remove the lock (only when it is still this run's)."""
        if not self.held:
            return
        self.held = False
        with _HELD_LOCK:
            _HELD.discard(self.info["token"])
        info = _read(self.path)
        if info and info.get("token") == self.info["token"]:
            try:
                os.unlink(self.path)
            except OSError:
                pass
