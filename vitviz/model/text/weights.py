"""Reading only the tensors a text tower needs from a checkpoint file (the image tower's stay on disk). No Qt.

- safetensors: the header is read and checked as :mod:`vitviz.model.checkpoints.reading` checks it, then only the
  wanted tensors' bytes are read, each into memory of its own (never left memory-mapped, for the reasons given
  there);
- a torch zip file (``.bin``, ``.pth``, ``.pt``): ``torch.load(mmap=True, weights_only=True)``, the wanted tensors
  copied out of the map;
- anything else (a legacy pickle, an ``.npz``): the checkpoint reader, then the wanted tensors kept.

:func:`tensor_names` lists a file's tensors and shapes: from the safetensors header alone, else as above.
"""

from __future__ import annotations

import struct
import warnings
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from vitviz.model.checkpoints.common import err
from vitviz.model.checkpoints.reading import (
    DTYPE_BITS,
    check_safetensors_header,
    read_file,
    read_safetensors_header,
    sniff,
    unwrap_state_dict,
)

Want = Callable[[str], bool]


def _safetensors(path: Path, header: dict[str, Any] | None, want: Want) -> dict[str, Any]:
    if header is None:
        header = read_safetensors_header(path)
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
    check_safetensors_header(header, path.stat().st_size - 8 - n, str(path))
    dtypes = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
              "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
              "BOOL": torch.bool}
    tensors = {}
    with open(path, "rb") as f:
        for name, info in header.items():
            if name == "__metadata__" or not want(name):
                continue
            if info["dtype"] not in dtypes:
                raise err(path, f"tensor {name!r} has dtype {info['dtype']}, which a text tower cannot use "
                                f"(known: {', '.join(k for k in dtypes if k in DTYPE_BITS)})")
            begin, end = info["data_offsets"]
            buf = torch.empty(end - begin, dtype=torch.uint8)
            f.seek(8 + n + begin)
            if f.readinto(memoryview(buf.numpy())) != end - begin:
                raise err(path, f"truncated file: the data of tensor {name!r} ends early")
            tensors[name] = buf.view(dtypes[info["dtype"]]).reshape(info["shape"])
    return tensors


def _zip_state(path: Path) -> dict[str, Any] | None:
    """The state dict of a torch zip file, memory-mapped, or None when that fails (the checkpoint reader then reads
    the file and explains what is wrong with it)."""
    try:
        with zipfile.ZipFile(path) as z:
            if not any(n.endswith("data.pkl") for n in z.namelist()):
                return None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            obj = torch.load(str(path), map_location="cpu", weights_only=True, mmap=True)
        return unwrap_state_dict(obj, str(path))
    except Exception:  # noqa: BLE001 - read again by read_file, which names the problem
        return None


def read_tensors(path: str | Path, want: Want) -> dict[str, Any]:
    """The tensors of ``path`` whose names ``want`` accepts (a ``module.`` prefix of DataParallel kept as written).

    Raises:
        CheckpointError: the file cannot be read (names it and the problem).
    """
    path = Path(path)
    kind, header = sniff(path) if path.is_file() else (None, None)
    if kind in ("safetensors", "safetensors?"):
        return _safetensors(path, header, want)
    state = _zip_state(path) if kind == "zip" else None
    if state is not None:
        return {k: v.clone() for k, v in state.items() if want(k)}
    return {k: v for k, v in read_file(path).tensors.items() if want(k)}


def tensor_names(path: str | Path) -> dict[str, tuple[int, ...]]:
    """``{name: shape}`` of the tensors in ``path``; a safetensors file from its header alone.

    Raises:
        CheckpointError: the file cannot be read.
    """
    path = Path(path)
    kind, header = sniff(path) if path.is_file() else (None, None)
    if kind in ("safetensors", "safetensors?"):
        header = header if header is not None else read_safetensors_header(path)
        return {k: tuple(v.get("shape") or ()) for k, v in header.items()
                if k != "__metadata__" and isinstance(v, dict)}
    state = _zip_state(path) if kind == "zip" else None
    if state is not None:
        return {k: tuple(v.shape) for k, v in state.items()}
    return {k: tuple(v.shape) for k, v in read_file(path).tensors.items()}
