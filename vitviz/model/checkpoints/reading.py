"""Reading checkpoint files into a :class:`RawCheckpoint`: safetensors, torch zip / legacy pickle, numpy ``.npz``
and Hugging Face folders.

The container is recognised by its structure, never by one byte: a safetensors file by a plausible 8-byte header
length followed by a JSON object of exactly that length; a torch >= 1.6 file or an ``.npz`` by the zip signature and
the archive's members; a legacy torch file by the pickle protocol opcode (``0x80`` then 2..5). The extension is only
a hint, used to explain what is wrong with a broken ``.safetensors`` file (a torch zip or pickle named
``.safetensors`` is read as the torch file it is). Pickles are read with ``torch.load(..., weights_only=True)``
only. No Qt.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import stat
import struct
import sys
import warnings
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from vitviz.model.checkpoints.common import RawCheckpoint, err, found, names

SAFETENSORS_MAX_HEADER = 100_000_000
ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")

# safetensors dtype -> bits per element
DTYPE_BITS: dict[str, int] = {
    "BOOL": 8, "U8": 8, "I8": 8, "F8_E4M3": 8, "F8_E5M2": 8, "F8_E4M3FNUZ": 8, "F8_E5M2FNUZ": 8, "F8_E8M0": 8,
    "I16": 16, "U16": 16, "F16": 16, "BF16": 16, "I32": 32, "U32": 32, "F32": 32, "I64": 64, "U64": 64,
    "F64": 64, "C64": 64, "F4": 4,
}


# ---------------------------------------------------------------------------------------------------------------------
# recognising the container
# ---------------------------------------------------------------------------------------------------------------------
def sniff(path: Path) -> tuple[str | None, Any]:
    """The container of ``path`` by structure.

    Returns:
        ``("safetensors", header)``: a plausible header length, then a JSON object of exactly that length starting
        with ``{``; ``("zip", None)``; ``("pickle", None)``: ``0x80`` then protocol 2..5; ``("safetensors?", None)``:
        none of these, but named ``.safetensors`` or with ``{`` at byte 8 (a broken safetensors file, explained by
        :func:`read_safetensors_header`); ``(None, None)`` otherwise.
    """
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(16)
        header = None
        if size >= 10 and head[8:9] == b"{":  # the format requires the header to start with "{"
            (n,) = struct.unpack("<Q", head[:8])
            if 2 <= n <= min(size - 8, SAFETENSORS_MAX_HEADER):
                f.seek(8)
                header = _parse_json(f.read(n))
    if isinstance(header, dict):
        return "safetensors", header
    if head[:4] in ZIP_MAGIC:
        return "zip", None
    if head[:1] == b"\x80" and len(head) > 1 and 2 <= head[1] <= 5:
        return "pickle", None
    if path.suffix.lower() == ".safetensors" or head[8:9] == b"{":
        return "safetensors?", None
    return None, None


def _parse_json(data: bytes) -> Any:
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return None


# ---------------------------------------------------------------------------------------------------------------------
# safetensors
# ---------------------------------------------------------------------------------------------------------------------
def read_safetensors_header(path: Path) -> dict[str, Any]:
    """Read and parse the header of a (possibly broken) safetensors file; every problem is a CheckpointError."""
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(9)
        if len(head) < 8:
            raise err(path, "truncated file (safetensors header length missing)")
        (n,) = struct.unpack("<Q", head[:8])
        if head[8:9] != b"{" and not 2 <= n <= size - 8:
            raise err(path, f"not a checkpoint: the name says safetensors, but the file does not start like one "
                            f"(header length {n} bytes in a file of {size})")
        if n > size - 8:
            raise err(path, f"truncated file: the safetensors header says {n} bytes, but the file has only {size} "
                            "bytes")
        if n < 2 or n > SAFETENSORS_MAX_HEADER:
            raise err(path, f"corrupt safetensors header: implausible header length {n} bytes")
        f.seek(8)
        data = f.read(n)
    try:
        header = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise err(path, f"corrupt safetensors header: not JSON ({e})") from None
    if not isinstance(header, dict):
        raise err(path, f"corrupt safetensors header: a JSON {_json_kind(header)}, expected an object mapping tensor "
                        "names to {dtype, shape, data_offsets}")
    return header


def _json_kind(v: Any) -> str:
    return {list: "list", str: "string", bool: "boolean", int: "number", float: "number"}.get(type(v), "null")


def check_safetensors_header(header: dict[str, Any], data_len: int, origin: str) -> dict[str, str]:
    """Validate a parsed safetensors header against ``data_len`` bytes of tensor data; return its metadata.

    Raises:
        CheckpointError: wrong types, unknown dtype, shape / size disagreement, offsets past the end (truncated),
            overlapping or uncovered data.
    """
    meta = header.get("__metadata__") or {}
    if not isinstance(meta, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items()):
        raise err(origin, "corrupt safetensors header: '__metadata__' should map strings to strings, found "
                          f"{found(meta)}")
    spans = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        what = f"corrupt safetensors header: tensor {name!r}"
        if not isinstance(info, dict):
            raise err(origin, f"{what} is described by {found(info)}, expected an object with dtype, shape and "
                              "data_offsets")
        dtype, shape, offs = info.get("dtype"), info.get("shape"), info.get("data_offsets")
        if not isinstance(dtype, str) or dtype not in DTYPE_BITS:
            raise err(origin, f"{what} has unknown dtype {found(dtype)} (known: {', '.join(DTYPE_BITS)})")
        if not isinstance(shape, list) or not all(_is_count(x) for x in shape):
            raise err(origin, f"{what}: shape should be a list of integers >= 0, found {found(shape)}")
        if not (isinstance(offs, list) and len(offs) == 2 and all(_is_count(x) for x in offs) and offs[0] <= offs[1]):
            raise err(origin, f"{what}: data_offsets should be [begin, end] with integers 0 <= begin <= end, found "
                              f"{found(offs)}")
        begin, end = offs
        if end > data_len:
            raise err(origin, f"truncated file: the tensors need {end} data bytes, but only {data_len} are present")
        numel = 1
        for x in shape:
            numel *= x
        bits = numel * DTYPE_BITS[dtype]
        if bits % 8 or bits // 8 != end - begin:
            raise err(origin, f"{what}: shape {shape} of {dtype} needs {bits / 8:g} bytes, but data_offsets "
                              f"{offs} span {end - begin}")
        spans.append((begin, end, name))
    pos = 0
    for begin, end, name in sorted(spans):
        if begin != pos:
            how = "overlaps the previous tensor" if begin < pos else f"leaves a gap after byte {pos}"
            raise err(origin, f"corrupt safetensors header: the data of tensor {name!r} starts at byte {begin} and "
                              f"{how}")
        pos = end
    if pos != data_len:
        raise err(origin, f"corrupt safetensors file: the header describes {pos} data bytes, but the file holds "
                          f"{data_len}")
    return dict(meta)


def _is_count(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool) and x >= 0


def _torch_dtypes() -> dict[str, torch.dtype]:
    """safetensors dtype names -> torch dtypes this torch has (F4 and the newest float8 kinds may be missing)."""
    names_ = {"BOOL": "bool", "U8": "uint8", "I8": "int8", "I16": "int16", "U16": "uint16", "F16": "float16",
              "BF16": "bfloat16", "I32": "int32", "U32": "uint32", "F32": "float32", "I64": "int64", "U64": "uint64",
              "F64": "float64", "C64": "complex64", "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2",
              "F8_E4M3FNUZ": "float8_e4m3fnuz", "F8_E5M2FNUZ": "float8_e5m2fnuz", "F8_E8M0": "float8_e8m0fnu"}
    return {k: getattr(torch, v) for k, v in names_.items() if isinstance(getattr(torch, v, None), torch.dtype)}


_TORCH_DTYPES = _torch_dtypes()


def read_safetensors(path: Path, header: dict[str, Any] | None = None) -> RawCheckpoint:
    """Read a safetensors file, validating its header first (``header``: already parsed by :func:`sniff`).

    The tensors are read into memory of their own, never left memory-mapped: a model built from mapped tensors
    would change when the file is rewritten in place (a training run saving to the same path) and crash (SIGBUS)
    when it is truncated; and reading straight into the tensors keeps the peak at one copy of the weights.
    """
    if header is None:
        header = read_safetensors_header(path)
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
    metadata = check_safetensors_header(header, path.stat().st_size - 8 - n, str(path))
    entries = sorted(((info["data_offsets"], name, info) for name, info in header.items() if name != "__metadata__"),
                     key=lambda e: e[0][0])
    if sys.byteorder != "little" or any(info["dtype"] not in _TORCH_DTYPES for _, _, info in entries):
        return _read_safetensors_mapped(path, metadata)
    tensors: dict[str, torch.Tensor] = {}
    try:
        with open(path, "rb") as f:
            for (begin, end), name, info in entries:
                buf = torch.empty(end - begin, dtype=torch.uint8)
                view = memoryview(buf.numpy())
                f.seek(8 + n + begin)
                done = 0
                while done < len(view):
                    got = f.readinto(view[done:])
                    if not got:
                        raise err(path, f"truncated file: the data of tensor {name!r} ends early")
                    done += got
                tensors[name] = buf.view(_TORCH_DTYPES[info["dtype"]]).reshape(info["shape"])
    except OSError as e:
        raise err(path, f"cannot read ({e.strerror or e})") from None
    return RawCheckpoint(tensors=tensors, origin=str(path), container="safetensors", metadata=metadata)


def _read_safetensors_mapped(path: Path, metadata: dict[str, str]) -> RawCheckpoint:
    """safetensors' own reader, for dtypes this torch lacks; each tensor copied out of the file's memory map."""
    from safetensors import safe_open

    try:
        tensors = {}
        with safe_open(str(path), framework="pt") as f:
            for k in f.keys():  # noqa: SIM118 - safe_open is not a mapping
                tensors[k] = f.get_tensor(k).clone()
    except Exception as e:  # noqa: BLE001 - safetensors raises its own error type
        raise err(path, f"corrupt safetensors file ({e})") from None
    return RawCheckpoint(tensors=tensors, origin=str(path), container="safetensors", metadata=metadata)


# ---------------------------------------------------------------------------------------------------------------------
# torch and numpy
# ---------------------------------------------------------------------------------------------------------------------
def _unpickler_complaint(text: str) -> str:
    """torch wraps the unpickler's complaint in advice to turn weights_only off: keep only the complaint."""
    text = text.replace("WeightsUnpickler error:", "\n\n")
    skip = ("Weights only load failed", "Please file an issue", "Check the documentation")
    for para in (p.strip() for p in text.split("\n\n")):
        if para and not para.startswith(skip):
            return " ".join(para.split())
    return ""


def torch_load(path: Path, container: str) -> RawCheckpoint:
    """``torch.load(weights_only=True)`` with every failure turned into a :class:`CheckpointError`."""
    origin = str(path)
    try:
        # argparse.Namespace: timm / DeiT training checkpoints keep their command-line args next to the weights;
        # rebuilding one only sets attributes.
        with warnings.catch_warnings(), torch.serialization.safe_globals([argparse.Namespace]):
            warnings.simplefilter("ignore")
            if path.suffix.lower() == ".safetensors":
                # torch.load hands any file *named* .safetensors to the safetensors reader ("header too large"):
                # the content decides here (a torch zip or pickle by that name), so it gets the open file
                with open(path, "rb") as fh:
                    obj = torch.load(fh, map_location="cpu", weights_only=True)
            else:
                obj = torch.load(origin, map_location="cpu", weights_only=True)
    except Exception as e:  # torch.load raises many types (UnpicklingError, RuntimeError, IndexError, struct.error)
        text = str(e)
        detail = _unpickler_complaint(text)
        low = text.lower()
        if isinstance(e, (EOFError, IndexError, struct.error)) or any(
                s in low for s in ("truncated", "ran out of input", "central directory", "unexpected eof",
                                   "failed reading")):
            raise err(origin, f"truncated or corrupt file ({detail or 'unexpected end of data'})") from None
        m = re.search(r"[Uu]nsupported (?:global: )?GLOBAL ([\w.]+)", text)
        if m or "Unsupported class" in text:
            what = f" ({m.group(1)})" if m else ""
            raise err(origin, f"refused: unpickling this file would import and call Python code{what}; vitviz only "
                              "reads tensors and plain containers (torch.load with weights_only=True). If it is a "
                              "whole pickled model from a source you trust, re-save its state_dict() or convert it "
                              "to safetensors.") from None
        if "Unsupported operand" in text or "magic number" in low:
            raise err(origin, "not a checkpoint: a plain Python pickle, not a file written by torch.save") from None
        raise err(origin, f"not a readable torch checkpoint ({detail or type(e).__name__})") from None
    return RawCheckpoint(tensors=unwrap_state_dict(obj, origin), origin=origin, container=container)


def read_npz(path: Path) -> RawCheckpoint:
    """An ``.npz`` archive of number arrays (pickled objects refused)."""
    try:
        with np.load(str(path), allow_pickle=False) as z:
            arrays = {k: np.asarray(z[k]) for k in z.files}
    except ValueError as e:  # object arrays need pickle
        raise err(path, f"refused: the .npz holds pickled objects ({e})") from None
    except (zipfile.BadZipFile, EOFError, OSError) as e:
        raise err(path, f"truncated or corrupt .npz archive ({e})") from None
    tensors = {}
    for k, a in arrays.items():
        if a.dtype.kind not in "fiub":
            raise err(path, f"array {k!r} has dtype {a.dtype}, not a number type")
        tensors[k] = torch.from_numpy(np.ascontiguousarray(a))
    return RawCheckpoint(tensors=tensors, origin=str(path), container="npz")


_WRAPPER_KEYS = ("state_dict", "model", "model_state_dict", "module", "model_state", "net", "params")


def unwrap_state_dict(obj: Any, origin: str) -> dict[str, torch.Tensor]:
    """Find the state dict inside a loaded object (bare state dict, or ``{"model": ...}`` / ``{"state_dict": ...}``)."""
    for _ in range(3):
        if isinstance(obj, Mapping) and not any(isinstance(v, torch.Tensor) for v in obj.values()):
            inner = next((obj[k] for k in _WRAPPER_KEYS if k in obj and isinstance(obj[k], Mapping)), None)
            if inner is None:
                break
            obj = inner
    if not isinstance(obj, Mapping):
        raise err(origin, f"not a checkpoint: it holds a {type(obj).__name__}, not a dict of tensors")
    tensors = {str(k): v for k, v in obj.items() if isinstance(v, torch.Tensor)}
    if not tensors:
        raise err(origin, f"not a checkpoint: no tensors found (top-level keys: {names(list(obj)[:10])})")
    if all(k.startswith("module.") for k in tensors):  # DataParallel / DDP
        tensors = {k[len("module."):]: v for k, v in tensors.items()}
    return tensors


# ---------------------------------------------------------------------------------------------------------------------
# files and folders
# ---------------------------------------------------------------------------------------------------------------------
def read_file(path: Path) -> RawCheckpoint:
    """Read one checkpoint file of any supported container."""
    try:
        st = path.stat()
    except FileNotFoundError:
        raise err(path, "no such file or directory") from None
    except OSError as e:  # ENOTDIR (a parent is a file), ELOOP (a symlink loop), EACCES ...
        raise err(path, f"cannot read ({e.strerror or e})") from None
    if not stat.S_ISREG(st.st_mode):  # a pipe, a device or a socket has no size and no random access: refused
        what = ("a pipe (FIFO)" if stat.S_ISFIFO(st.st_mode) else
                "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else
                "a socket" if stat.S_ISSOCK(st.st_mode) else "not a regular file")
        raise err(path, f"not a checkpoint: {what}; save the checkpoint to a file and open that")
    if st.st_size == 0:
        raise err(path, "not a checkpoint: the file is empty")
    kind, header = sniff(path)
    if kind == "safetensors":
        return read_safetensors(path, header)
    if kind == "zip":
        return _read_zip(path)
    if kind == "pickle":
        return torch_load(path, "torch-legacy")
    if kind == "safetensors?":
        return read_safetensors(path)  # raises, explaining what is wrong with the header
    kinds = "safetensors, torch .pth/.bin/.pt (zip or legacy pickle), numpy .npz, or a Hugging Face directory"
    raise err(path, f"not a checkpoint: the file is neither of {kinds}")


def _read_zip(path: Path) -> RawCheckpoint:
    try:
        with zipfile.ZipFile(path) as z:
            members = z.namelist()
    except (zipfile.BadZipFile, OSError) as e:
        raise err(path, f"truncated or corrupt file: the zip archive cannot be read ({e})") from None
    if members and all(n.endswith(".npy") for n in members):
        return read_npz(path)
    if any(n.endswith("constants.pkl") or "/code/" in n for n in members):
        raise err(path, "a TorchScript archive (torch.jit.save) is not supported: save the model's state_dict() "
                        "with torch.save or safetensors instead")
    if any(n.endswith("data.pkl") for n in members):
        return torch_load(path, "torch")
    raise err(path, f"not a checkpoint: a zip archive holding {names(members[:6])}")


def _read_json_object(path: Path) -> dict[str, Any]:
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise err(path, f"cannot read {path.name} ({e})") from None
    if not isinstance(obj, dict):
        raise err(path, f"{path.name} holds a JSON {_json_kind(obj)}, expected an object of settings")
    return obj


def _not_a_file(p: Path, what: str) -> None:
    kind = "a folder" if p.is_dir() else "not a regular file"
    raise err(p, f"is {kind}; a Hugging Face folder keeps its {what} in a file of that name")


def read_dir(path: Path) -> RawCheckpoint:
    """A Hugging Face or timm folder: ``model.safetensors`` or ``pytorch_model.bin``, ``config.json`` and
    ``preprocessor_config.json`` when present; an open_clip folder: ``open_clip_model.safetensors`` or
    ``open_clip_pytorch_model.bin`` with ``open_clip_config.json``."""
    candidates = ["model.safetensors", "pytorch_model.bin",
                  "open_clip_model.safetensors", "open_clip_pytorch_model.bin"]
    weights = next((path / c for c in candidates if (path / c).is_file()), None)
    odd = next((path / c for c in candidates if (path / c).exists() and not (path / c).is_file()), None)
    if weights is None and odd is not None:
        _not_a_file(odd, "weights")
    if weights is None:
        shards = sorted(path.glob("model-*-of-*.safetensors")) + sorted(path.glob("pytorch_model-*-of-*.bin"))
        if shards:
            raise err(path, f"sharded checkpoints ({shards[0].name} ...) are not supported; merge the shards into "
                            "one model.safetensors")
        files = sorted(p.name for p in path.iterdir())
        found_ = names(files, limit=10) if files else "the folder is empty"
        raise err(path, f"directory holds no model.safetensors or pytorch_model.bin (found: {found_})")
    raw = read_file(weights)
    raw.origin = str(path)
    for name in ("config.json", "preprocessor_config.json", "open_clip_config.json"):
        if (path / name).exists() and not (path / name).is_file():
            _not_a_file(path / name, "settings")
    if (path / "config.json").is_file():
        raw.hf_config = _read_json_object(path / "config.json")
    elif (path / "open_clip_config.json").is_file():  # an open_clip hub folder: model_cfg, preprocess_cfg
        raw.hf_config = _read_json_object(path / "open_clip_config.json")
    if (path / "preprocessor_config.json").is_file():
        raw.hf_preprocessor = _read_json_object(path / "preprocessor_config.json")
    return raw


def read_raw(source: str | os.PathLike[str] | Mapping[str, Any]) -> RawCheckpoint:
    """Read ``source`` (file, directory or state dict) into a :class:`RawCheckpoint` without converting it."""
    if isinstance(source, Mapping):
        return RawCheckpoint(tensors=unwrap_state_dict(source, "<state dict>"), origin="<state dict>",
                             container="dict")
    path = Path(source).expanduser()
    if path.is_dir():
        return read_dir(path)
    return read_file(path)
