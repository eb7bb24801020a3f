"""Small file-system helpers shared by the writers (checkpoints, PNG exports). No Qt."""

from __future__ import annotations

import os


def default_file_mode() -> int:
    """The mode a plainly created file gets under the current umask (``0o666 & ~umask``).

    ``tempfile.mkstemp`` creates files with mode 0600; writers that rename a temporary file into place apply this
    so that the result has the same permissions as any other file the user saves.
    """
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask
