"""Why what a user typed names no model: :class:`ModelNameError`, one short line naming the text and the cause (no
such file; not a known name; an id that cannot exist), a "did you mean" when a known name is close, and a pointer to
``vitviz models`` (the one place that lists the names). Plain strings: no torch, no Qt, no network.

:func:`vitviz.model.sources.refs.parse_model_ref` and :func:`vitviz.model.sources.hub.hub_repo` raise it; the CLI
and the window show its text as it is.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Iterable
from pathlib import Path

LISTING = "'vitviz models' lists the names"
ARCHITECTURES = "vitviz.list_models() lists them"  # (random weights: no download, so not in 'vitviz models')
# names that end like a checkpoint file: "no such file" is the better message for them than "not a name"
CHECKPOINT_SUFFIXES = (".safetensors", ".pth", ".pt", ".bin", ".npz", ".ckpt", ".json", ".pkl", ".h5", ".onnx")
SHOWN_MAX = 100  # longer text is shown by its start and end
SCAN_MAX = 2000  # folder entries looked at for a "did you mean" of a missing file


class ModelNameError(ValueError):
    """What the user typed names no model. The message is one short line: the text as typed, the cause, a
    suggestion when a known name is close, and where the names are listed."""


def shown(text: str) -> str:
    """``text`` as it appears in a message: as typed, quoted when it is empty, has spaces at its ends, characters
    that do not print or ends with ``:``; the start and the end of a long one."""
    if len(text) > SHOWN_MAX:
        text = f"{text[:SHOWN_MAX - 30]}…{text[-25:]}"
    plain = text and text == text.strip() and text.isprintable() and not text.endswith(":")
    return text if plain else repr(text)


def close_name(text: str, candidates: Iterable[str], cutoff: float = 0.75) -> str | None:
    """The known name closest to ``text`` (case ignored), or None when none is close."""
    by_lower: dict[str, str] = {}
    for c in candidates:
        by_lower.setdefault(c.lower(), c)
    found = difflib.get_close_matches(text.strip().lower(), list(by_lower), n=1, cutoff=cutoff)
    return by_lower[found[0]] if found else None


def close_file(typed: str) -> str | None:
    """The name of a file or folder beside the missing ``typed`` whose name is close to it (a typo), or None."""
    try:
        path = Path(typed).expanduser()
        folder = path.parent
        if not path.name or not folder.is_dir():
            return None
        with os.scandir(folder) as entries:
            names = [e.name for _, e in zip(range(SCAN_MAX), entries)]
    except (OSError, RuntimeError, ValueError):  # unreadable folder, unknown ~user, NUL in the name
        return None
    found = difflib.get_close_matches(path.name, names, n=1, cutoff=0.75)
    return found[0] if found else None


def name_error(text: str, cause: str, suggestion: str | None = None, *,
               listing: str | None = LISTING) -> ModelNameError:
    """``"<text>: <cause>; did you mean <suggestion>? ('vitviz models' lists the names)"`` (``listing``: where the
    names are listed, or None)."""
    hint = f"; did you mean {suggestion}?" if suggestion else ""
    return ModelNameError(f"{shown(text)}: {cause}{hint}" + (f" ({listing})" if listing else ""))


def file_like(text: str) -> bool:
    """Ends like a checkpoint file (``.pth``, ``.safetensors`` ...)."""
    return text.strip().lower().endswith(CHECKPOINT_SUFFIXES)


def path_like(text: str) -> bool:
    """Written as a path: a folder separator, a leading ``~`` or ``.``, or a checkpoint suffix."""
    t = text.strip()
    return "/" in t or "\\" in t or t.startswith(("~", ".")) or file_like(t)
