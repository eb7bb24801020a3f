"""Writing native vitviz checkpoints: safetensors with the :class:`ModelSpec` JSON in the metadata. No Qt."""

from __future__ import annotations

import errno
import os
import re
import tempfile
from pathlib import Path

import torch

from vitviz._util.files import default_file_mode
from vitviz.model.checkpoints.common import err
from vitviz.model.checkpoints.native import FORMAT_TAG, SPEC_KEY
from vitviz.model.spec import ModelSpec
from vitviz.model.vit import ViT


def _write_safetensors(tensors: dict[str, torch.Tensor], path: str, metadata: dict[str, str]) -> None:
    """safetensors' ``save_file``, its I/O failures raised as :class:`OSError` (it raises its own error type)."""
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    try:
        save_file(tensors, path, metadata=metadata)
    except SafetensorError as e:
        m = re.search(r"I/O error: (.*?) \(os error (\d+)\)", str(e))
        raise (OSError(int(m.group(2)), m.group(1)) if m else OSError(errno.EIO, str(e))) from e


def _cause(e: OSError) -> str:
    return e.strerror or str(e) or type(e).__name__


def _file_in_the_way(folder: Path) -> Path | None:
    """The nearest existing ancestor of ``folder`` (itself included) when it is not a folder."""
    for p in (folder, *folder.parents):
        if p.exists():
            return None if p.is_dir() else p
    return None


def save_checkpoint(model: ViT, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
    """Write ``model`` as a native vitviz checkpoint: safetensors with the :class:`ModelSpec` JSON in its metadata.

    The file is written to a temporary name next to ``path`` and moved into place, so a failed write never leaves a
    half-written checkpoint (nor the temporary file).

    Args:
        model: a :class:`ViT`; its ``spec`` is saved (one is made from its config when it has none).
        path: destination file (``.safetensors`` recommended); missing folders are created.
        overwrite: replace an existing file; without it an existing ``path`` raises ``FileExistsError``.

    Returns:
        The path written.

    Raises:
        FileExistsError: ``path`` exists and ``overwrite`` is False.
        CheckpointError: ``path`` is a folder, a parent is a file, or writing failed (disk full, no permission ...);
            the message starts with ``path`` and names the cause.
    """
    path = Path(path)
    if path.is_dir():
        raise err(path, "is a folder, not a file name")
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path}: file exists; pass overwrite=True to replace it")
    if not isinstance(model, ViT):
        raise TypeError(f"save_checkpoint expects a vitviz ViT, got {type(model).__name__}")
    blocker = _file_in_the_way(path.parent)
    if blocker is not None:
        raise err(path, f"cannot save: {blocker} is a file, not a folder")
    spec = model.spec if isinstance(model.spec, ModelSpec) else ModelSpec(config=model.config, name="vit")
    if spec.config != model.config:
        spec = spec.replace(config=model.config)
    spec = spec.replace(source_format="native", source_path=None)
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in model.state_dict().items()}
    from vitviz import __version__

    metadata = {"format": "pt", "producer": FORMAT_TAG, "vitviz_version": __version__, SPEC_KEY: spec.to_json()}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        raise err(path, f"cannot save in {path.parent} ({_cause(e)})") from e
    os.close(fd)
    try:
        _write_safetensors(tensors, tmp, metadata)
        os.chmod(tmp, default_file_mode())
        os.replace(tmp, path)
    except BaseException as e:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(e, OSError):
            raise err(path, f"writing failed ({_cause(e)}); nothing was saved") from e
        raise
    return path
