"""The files of ``vitviz export`` (:mod:`vitviz.batch.export`): the output folder checked and created before any
work, the temporaries a killed run left removed, each file written atomically and named in the journal first, and
never a file replaced that this export did not write (without ``--overwrite``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from vitviz._util.files import describe_os_error, output_folder_problem
from vitviz.imaging import ExportError, write_atomic

TEMPORARY_ENDINGS = (".png.tmp", ".npy.tmp", ".gif.tmp", ".apng.tmp", ".mp4.tmp")


class OutputFiles:
    """The output folder ``out`` of one run. ``ours``: the files (relative to ``out``) this export wrote, which it
    may replace; ``journal``: the :class:`~vitviz.batch.manifest.Appender` each file is named in before it is
    written (set once the run has opened it)."""

    def __init__(self, out: Path, overwrite: bool):
        self.out = out
        self.overwrite = overwrite
        self.ours: set[str] = set()
        self.journal: Any = None

    def prepare(self) -> None:
        """The output folder, checked (:func:`vitviz._util.files.output_folder_problem`: the check ``vitviz stats``
        and ``vitviz evaluate --csv`` make too) and created before any work."""
        problem = output_folder_problem(self.out)
        if problem:
            raise ExportError(self.out, problem)
        try:
            self.out.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise ExportError(self.out, f"cannot create the output folder ({describe_os_error(e)})") from None

    def remove_stale_temporaries(self, pending: set[str]) -> None:
        """A run killed while writing leaves the hidden temporary file of :func:`vitviz.imaging.write_atomic`
        (``.<stem>.<random>.png.tmp``) beside a file it was writing: remove those of the files its journal names
        (``pending``; this shard's journal only: another shard may be writing its own right now)."""
        stems: dict[Path, set[str]] = {}
        for rel in pending:
            p = self.out / rel
            stems.setdefault(p.parent, set()).add(p.stem)
        for folder, names in stems.items():
            try:
                entries = list(folder.iterdir())
            except OSError:
                continue
            for f in entries:
                n = f.name
                if not (n.startswith(".") and n.endswith(TEMPORARY_ENDINGS)):
                    continue
                dots = [i for i, c in enumerate(n) if c == "." and i > 0]
                if any(n[1:i] in names for i in dots):
                    try:
                        f.unlink()
                    except OSError:
                        pass

    def write(self, rel: str, data: bytes, written: list[str]) -> None:
        """Write ``data`` to ``out / rel`` (named in the journal first) and add ``rel`` to ``written``."""
        target = self.out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        replace_ok = self.overwrite or rel in self.ours
        if target.is_dir():
            raise ExportError(target, "a folder of that name exists")
        if not replace_ok and (target.exists() or target.is_symlink()):
            raise FileExistsError(f"{target} already exists and was not written by this export (pass --overwrite "
                                  "to replace it)")
        self.journal.write({"files": [rel]})
        self.ours.add(rel)
        write_atomic(target, lambda fh: fh.write(data), overwrite=replace_ok, suffix=Path(rel).suffix + ".tmp")
        written.append(rel)
