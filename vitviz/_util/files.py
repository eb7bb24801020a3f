"""Small file-system helpers shared by the writers (checkpoints, PNG exports, the batch commands' outputs): file
modes, why a folder cannot take a new file (or cannot be an output folder), and a failed write's cause in words; and
the reading of a JSON file with one error naming it. No Qt."""

from __future__ import annotations

import errno
import json
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def read_json(path: Path, error: Callable[[str], Exception], what: str = "it") -> Any:
    """The JSON value of the file ``path``; ``error(f"{path}: cannot read {what} ({cause})")`` is raised when it cannot
    be read or is not JSON (an I/O error, not UTF-8, bad syntax, nesting too deep)."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise error(f"{path}: cannot read {what} ({e})") from None


def default_file_mode() -> int:
    """The mode a plainly created file gets under the current umask (``0o666 & ~umask``).

    ``tempfile.mkstemp`` creates files with mode 0600; writers that rename a temporary file into place apply this
    so that the result has the same permissions as any other file the user saves.
    """
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def folder_problem(folder: str | os.PathLike) -> str | None:
    """Why a file cannot be created in ``folder`` before trying (None when it is an existing folder).

    ``"<x> is a file, not a folder"`` when the folder, or the nearest existing folder above it, is a file;
    ``"folder <folder> does not exist"`` otherwise.
    """
    folder = Path(folder) if str(folder) else Path(".")
    if folder.is_dir():
        return None
    probe = folder
    while True:
        try:
            st = probe.stat()
        except NotADirectoryError:  # something above is a file: keep climbing to name it
            pass
        except OSError:
            pass
        else:
            if not stat.S_ISDIR(st.st_mode):
                return f"{probe} is a file, not a folder"
            break
        if probe.parent == probe:
            break
        probe = probe.parent
    return f"folder {folder} does not exist"


def describe_os_error(e: OSError) -> str:
    """The cause of a failed write in words, with the system's own message (``strerror``) in brackets."""
    text = e.strerror or str(e) or type(e).__name__
    cause = {
        errno.ENOSPC: "the disk is full",
        getattr(errno, "EDQUOT", -1): "the disk quota is exhausted",
        errno.EFBIG: "the file is too large for this file system",
        errno.EROFS: "the file system is read-only",
        errno.EACCES: "permission denied",
        errno.EPERM: "permission denied",
        errno.EIO: "input/output error (a failing disk, or a network or removable drive that went away)",
    }.get(e.errno or 0)
    return f"{cause} ({text})" if cause and cause.lower() != text.lower() else text


def output_folder_problem(folder: str | os.PathLike) -> str | None:
    """Why ``folder`` cannot take the files of a command, found before any work (None when it can): a file in its
    place or above it, or no permission to create files there. An existing folder is probed with a temporary file
    (created and removed: the writers' own first step, so it fails as they would, read-only mounts included); a
    missing one is creatable when its nearest existing parent is a folder that takes the probe. Nothing stays.

    The answers: ``"a file of that name exists (the output must be a folder)"``, ``"<x> is a file, not a folder"``,
    ``"the output folder is not writable (<cause>)"``, ``"cannot create the output folder: <parent> is not writable
    (<cause>)"``.
    """
    folder = Path(folder) if str(folder) else Path(".")
    probe = folder
    while not probe.is_dir():
        if probe.is_symlink() and not probe.exists():
            return f"{probe} is a link to nothing ({os.readlink(probe)})"
        if probe.exists():
            return ("a file of that name exists (the output must be a folder)" if probe == folder
                    else f"{probe} is a file, not a folder")
        if probe.parent == probe:
            return f"folder {folder} does not exist"
        probe = probe.parent
    try:
        fd, tmp = tempfile.mkstemp(prefix=".vitviz-probe.", dir=probe)
    except OSError as e:
        if probe == folder:
            return f"the output folder is not writable ({describe_os_error(e)})"
        return f"cannot create the output folder: {probe} is not writable ({describe_os_error(e)})"
    os.close(fd)
    os.unlink(tmp)
    return None


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (on this machine)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return pid > 0
    return True


class PendingOutputs:
    """The journal of a command that writes a few outputs one after another (``vitviz stats``' CSVs and figure,
    ``vitviz merge``'s merged files): a hidden ``.vitviz-<name>.pending`` in the folder lists them before the first
    is written and is removed after the last. A run killed between two of them leaves it, and :meth:`left` tells
    the rerun which existing files a killed run of the same command wrote, so that it replaces them instead of
    refusing them as another's (a file not listed stays protected)."""

    def __init__(self, folder: str | os.PathLike, name: str):
        self.path = Path(folder) / f".vitviz-{name}.pending"

    def left(self) -> set[str]:
        """The file names (in the folder) a killed run was writing; empty when none was killed."""
        try:
            value = json.loads(self.path.read_bytes()[:1 << 20])
        except (OSError, ValueError):
            return set()
        names = value.get("files") if isinstance(value, dict) else None
        return {n for n in names if isinstance(n, str) and "/" not in n} if isinstance(names, list) else set()

    def begin(self, paths: list[Path] | list[str]) -> None:
        """Record ``paths`` (files of the folder, or what is being written in words) as being written (synced before
        the first of them is)."""
        data = json.dumps({"files": sorted({Path(p).name for p in paths} | self.left())}).encode()
        for old in self.path.parent.glob(f"{self.path.name}.*.tmp"):  # a killed run's, half written
            pid = old.name[len(self.path.name) + 1:-len(".tmp")]
            if pid.isdigit() and not process_alive(int(pid)):
                old.unlink(missing_ok=True)
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    def end(self) -> None:
        """Every output written: the journal goes."""
        try:
            self.path.unlink()
        except FileNotFoundError:
            pass
