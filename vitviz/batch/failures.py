"""How the batch commands report a failed image: one line naming the file, and the exit status that counts the
failures."""

from __future__ import annotations

from vitviz.imaging import ImageError

FAILED_BASE = 64  # exit status 64 + n: n images failed (capped at 63)
MAX_FAILED_STATUS = 63


def error_text(e: BaseException, path: str) -> str:
    """One line naming the file: the project's errors already do."""
    if isinstance(e, ImageError):
        msg = str(e)
    elif isinstance(e, MemoryError):
        msg = f"not enough memory ({e})" if str(e) else "not enough memory"
    elif isinstance(e, (ValueError, RuntimeError, OSError)):
        msg = str(e) or type(e).__name__
    else:
        msg = f"unexpected {type(e).__name__}: {e}"
    msg = " ".join(part.strip() for part in msg.splitlines() if part.strip())
    return msg if path in msg else f"{path}: {msg}"

