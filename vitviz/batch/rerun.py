"""What a rerun of ``vitviz export`` does with a folder an export wrote before, decided before any work.

* The folder was last written with the same settings (the model's content hash among them): a resume; the images
  whose records say they are complete are skipped, the others done.
* Other settings (another model at the same path, another colormap ...), or a manifest from before vitviz recorded
  the model's identity: :class:`ResumeMismatch`, one line naming the folder and what changed, and how to go on
  (``--overwrite`` redoes every image with the new settings; or another ``--out``). Mixing two models' maps in one
  folder, each file looking right, is the one outcome that must not happen silently, and a silent restart of a
  long export is the next worst. An old manifest cannot tell whether its model file was replaced since, so none of
  its images can count as done: that is said too, rather than a warning scrolling past while every image is
  redone (one rerun with ``--overwrite`` does it, knowingly).
* A line of its own manifest changed by hand: :class:`~vitviz.batch.manifest.ManifestError` naming the file and
  line (with ``--overwrite``: removed with a warning, since every image is redone); in another shard's manifest:
  skipped with a warning.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vitviz.batch.manifest import FolderManifests, ManifestError, drop_lines

HOW = "pass --overwrite to redo every image with these settings, or choose another --out"
MODEL_KEY = "model_sha256"


class ResumeMismatch(ValueError):
    """The output folder holds maps made with other settings (the message names the folder and what changed)."""


def setting_text(v: Any) -> str:
    """A setting's value in words ("on", "off", "a,b", "(none)"), for messages that compare settings."""
    if isinstance(v, bool):
        return "on" if v else "off"
    if isinstance(v, (list, tuple)):
        return ",".join(setting_text(x) for x in v) or "(none)"
    return "(none)" if v is None else str(v)


def changes(old: Mapping[str, Any], new: Mapping[str, Any], flags: Mapping[str, str],
            refs: tuple[Any, Any] = (None, None)) -> list[str]:
    """What differs between two runs' settings, in the user's words: the model first (with where each was loaded
    from, ``refs``: before, now), then each option as its flag (``flags``: setting -> flag; others by their name)
    with the value before and now."""
    out = []
    if old.get(MODEL_KEY) != new.get(MODEL_KEY):
        a, b = (str(x.get(MODEL_KEY) or "?")[:12] + "..." + (f" from {r}" if r else "")
                for x, r in zip((old, new), refs))
        out.append(f"the model changed (sha256 {a} before, {b} now)")
    for key in list(new) + [k for k in old if k not in new]:  # in the order of the settings
        if key in (MODEL_KEY, "model") or setting_text(old.get(key)) == setting_text(new.get(key)):
            continue
        out.append(f"{flags.get(key, key)} {setting_text(old.get(key))} before, {setting_text(new.get(key))} now")
    return out


def check_folder(out: Path, state: FolderManifests, settings: Mapping[str, Any], flags: Mapping[str, str], *,
                 overwrite: bool, warn: Any, own: Path | None = None, model_ref: str | None = None) -> None:
    """Refuse to resume into ``out`` when it was written with other settings or a manifest line was changed by hand
    (see the module's docstring). A damaged line of this run's own manifest ``own`` stops it; with ``overwrite`` it
    is removed (so that the next resume does not stop on it again), with a warning (``warn(line)``). Damaged lines
    of other shards' manifests are skipped with a warning: the records there are theirs.

    Raises:
        ManifestError: a line no run of vitviz export wrote (the first one, naming its file and line).
        ResumeMismatch: other settings, or an old manifest that does not say which model made its maps.
    """
    mine = [d for d in state.damaged if d[0] == own]
    if mine and not overwrite:
        path, line, why = mine[0]
        more = f" (and {len(mine) - 1} more line(s))" if len(mine) > 1 else ""
        raise ManifestError(f"{path} line {line}: {why}{more}: the manifest was changed by hand or is not one of "
                            f"vitviz export; repair or delete that line, {HOW}")
    if mine:
        drop_lines(own, {n for _, n, _ in mine})
    for path, line, why in state.damaged:  # another shard's manifest: its records are not this run's
        what = "removed (--overwrite redoes every image)" if path == own else "skipped"
        warn(f"{path} line {line}: {why}: {what}")
    if overwrite:
        return
    latest = state.latest_run()
    if latest is None:
        if state.legacy:
            raise ResumeMismatch(f"{state.legacy[0]} was written by an older vitviz export that did not record which "
                                 f"model made the maps in {out}, so none of its images can count as done; {HOW}")
        return
    path, run = latest
    diff = changes(run["settings"], settings, flags, (run.get("model"), model_ref))
    if diff:
        raise ResumeMismatch(f"{out} holds maps made with other settings (the run of {run.get('started', '?')} in "
                             f"{path.name}): {'; '.join(diff)}; {HOW}")
