"""The text towers' files checked before they are read: a regular file (not a folder, a device such as a link to
``/dev/zero``, a pipe), of a bounded size. No Qt, no torch."""

from __future__ import annotations

import os
import stat
from pathlib import Path

MAX_SETTINGS_BYTES = 16 * 2**20  # config.json / open_clip_config.json / tokenizer settings: a few kB in every release
MAX_TOKENIZER_BYTES = 128 * 2**20  # tokenizer.json, vocab.json, merges.txt, spiece.model (Gemma's tokenizer.json:
# ~34 MB; a 10^6-token one, ~19 MB, is read in ~4 s and then refused by the embedding's size)


def regular_file(path: Path, limit: int | None = None, what: str = "a settings file", *,
                 error: type[ValueError]) -> bool:
    """True when ``path`` is a regular file (of at most ``limit`` bytes), False when nothing is there.

    Raises:
        ``error``: something else is there (a folder, a device, a pipe, a dangling link), or a larger file.
    """
    if not os.path.lexists(path):
        return False
    try:
        st = path.stat()
    except OSError as e:
        raise error(f"{path}: cannot read {what} ({e.strerror or e})") from None
    if not stat.S_ISREG(st.st_mode):
        kind = "a folder" if stat.S_ISDIR(st.st_mode) else "a device, a pipe or a socket"
        raise error(f"{path}: {kind}, not a regular file")
    if limit is not None and st.st_size > limit:
        raise error(f"{path}: {st.st_size / 2**20:.0f} MiB, too large for {what} (at most "
                    f"{limit / 2**20:.0f} MiB)")
    return True
