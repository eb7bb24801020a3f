"""Small file-system helpers shared by the writers (checkpoints, PNG exports): file modes, why a folder cannot
take a new file, and a failed write's cause in words. No Qt."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


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
