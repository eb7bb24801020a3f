"""Load and save ViT checkpoints: native vitviz, timm, torchvision, Hugging Face and Google ``.npz``.

``load_checkpoint(source)`` accepts a file, a directory or an in-memory state dict. The file type is recognised by
its bytes (safetensors header, zip archive, legacy torch pickle), the checkpoint *format* by its keys, and the
architecture is inferred from tensor shapes:

=============  ==============================================================  ===================================
format         recognised by                                                   preprocessing default
=============  ==============================================================  ===================================
native         safetensors metadata ``vitviz_spec`` (written by                the saved spec
               :func:`save_checkpoint`)
timm           ``patch_embed.proj.weight`` + ``blocks.0.attn.qkv.weight``      distilled (``dist_token``): ImageNet
                                                                               mean/std; otherwise mean = std = 0.5;
                                                                               bicubic, crop_pct 0.875 (1.0 above
                                                                               224 px)
torchvision    ``conv_proj.weight`` + ``encoder.layers.encoder_layer_0.*``     224 px: resize 256 bilinear, crop
                                                                               224, ImageNet mean/std (V1 weights);
                                                                               other sizes: SWAG E2E (resize = crop,
                                                                               bicubic)
hf             ``[vit.]embeddings.patch_embeddings.projection.weight``         ``preprocessor_config.json`` if
                                                                               present, else resize to the input
                                                                               size, bilinear, mean = std = 0.5
npz            ``embedding/kernel`` + ``Transformer/...`` (Google vit_jax /    mean = std = 0.5
               big_vision)
=============  ==============================================================  ===================================

The number of heads comes from the config where there is one (native, HF); otherwise from the paper's table of
widths (192: 3, 384: 6, 768: 12, 1024: 16, 1280: 16), otherwise head_dim 64; ``num_heads=`` overrides it.
1000-class heads without labels of their own get the ImageNet-1k class names (torchvision's list).

Every problem raises :class:`CheckpointError` (a ``ValueError``) whose message names the file and the problem.
Pickled files (``.pth``, ``.bin``, ``.pt``) are read with ``torch.load(..., weights_only=True)`` only. No Qt here.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import struct
import tempfile
import warnings
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal, Mapping, Sequence

import numpy as np
import torch

from vitviz._io import default_file_mode
from vitviz.model.spec import ModelSpec, imagenet_preprocess, inception_preprocess
from vitviz.model.vit import ViT, ViTConfig, resample_pos_embed
from vitviz.preprocess import IMAGENET_MEAN, IMAGENET_STD, INCEPTION_MEAN, INCEPTION_STD, Preprocess

Format = Literal["native", "timm", "torchvision", "hf", "npz"]
FORMATS: tuple[str, ...] = ("native", "timm", "torchvision", "hf", "npz")
PreprocessArg = Preprocess | Literal["imagenet", "inception"] | None

NATIVE_FORMAT_TAG = "vitviz"
_SPEC_KEY = "vitviz_spec"

# ViT paper (Table 1) and DeiT widths -> heads; everything else falls back to head_dim 64.
KNOWN_HEADS: dict[int, int] = {192: 3, 384: 6, 768: 12, 1024: 16, 1280: 16}


class CheckpointError(ValueError):
    """A checkpoint could not be read or converted; the message names the file and the problem."""


# ---------------------------------------------------------------------------------------------------------------------
# saving
# ---------------------------------------------------------------------------------------------------------------------
def save_checkpoint(model: ViT, path: str | os.PathLike[str], *, overwrite: bool = False) -> Path:
    """Write ``model`` as a native vitviz checkpoint: safetensors with the :class:`ModelSpec` JSON in its metadata.

    The file is written to a temporary name next to ``path`` and moved into place, so a failed write never leaves a
    half-written checkpoint.

    Args:
        model: a :class:`ViT`; its ``spec`` is saved (one is made from its config when it has none).
        path: destination file (``.safetensors`` recommended).
        overwrite: replace an existing file; without it an existing ``path`` raises ``FileExistsError``.

    Returns:
        The path written.
    """
    from safetensors.torch import save_file

    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path}: file exists; pass overwrite=True to replace it")
    if not isinstance(model, ViT):
        raise TypeError(f"save_checkpoint expects a vitviz ViT, got {type(model).__name__}")
    spec = model.spec if isinstance(model.spec, ModelSpec) else ModelSpec(config=model.config, name="vit")
    if spec.config != model.config:
        spec = spec.replace(config=model.config)
    spec = spec.replace(source_format="native", source_path=None)
    tensors = {k: v.detach().to("cpu").contiguous().clone() for k, v in model.state_dict().items()}
    from vitviz import __version__

    metadata = {"format": "pt", "producer": NATIVE_FORMAT_TAG, "vitviz_version": __version__,
                _SPEC_KEY: spec.to_json()}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        save_file(tensors, tmp, metadata=metadata)
        os.chmod(tmp, default_file_mode())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


# ---------------------------------------------------------------------------------------------------------------------
# reading raw files
# ---------------------------------------------------------------------------------------------------------------------
@dataclass
class RawCheckpoint:
    """What was read from disk before conversion.

    Attributes:
        tensors: name -> tensor (numpy arrays from ``.npz`` are converted to tensors).
        origin: the file or directory, for messages (``"<state dict>"`` for in-memory input).
        container: ``"safetensors"``, ``"torch"`` (zip), ``"torch-legacy"``, ``"npz"`` or ``"dict"``.
        metadata: safetensors metadata (strings), empty otherwise.
        hf_config: parsed ``config.json`` of a Hugging Face directory, else None.
        hf_preprocessor: parsed ``preprocessor_config.json`` of a Hugging Face directory, else None.
    """

    tensors: dict[str, torch.Tensor]
    origin: str
    container: str
    metadata: dict[str, str] = field(default_factory=dict)
    hf_config: dict[str, Any] | None = None
    hf_preprocessor: dict[str, Any] | None = None


def _err(origin: str, msg: str) -> CheckpointError:
    return CheckpointError(f"{origin}: {msg}")


def _read_safetensors(path: Path) -> RawCheckpoint:
    from safetensors import safe_open

    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise _err(str(path), "truncated file (safetensors header length missing)")
        (n,) = struct.unpack("<Q", head)
        header_bytes = f.read(n)
    if len(header_bytes) < n:
        raise _err(str(path), f"truncated file: the safetensors header says {n} bytes, but the file has only {size} bytes")
    try:
        header = json.loads(header_bytes.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _err(str(path), f"corrupt safetensors header ({e})") from None
    data_len = size - 8 - n
    ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__" and isinstance(v, dict)
            and "data_offsets" in v]
    if ends and max(ends) > data_len:
        raise _err(str(path), f"truncated file: the tensors need {max(ends)} data bytes, but only {data_len} are present")
    try:
        tensors = {}
        with safe_open(str(path), framework="pt") as f:
            metadata = dict(f.metadata() or {})
            for k in f.keys():
                tensors[k] = f.get_tensor(k)
    except Exception as e:  # safetensors raises its own error type
        raise _err(str(path), f"corrupt safetensors file ({e})") from None
    return RawCheckpoint(tensors=tensors, origin=str(path), container="safetensors", metadata=metadata)


def _unpickler_complaint(text: str) -> str:
    """torch wraps the unpickler's complaint in advice to turn weights_only off: keep only the complaint."""
    text = text.replace("WeightsUnpickler error:", "\n\n")
    skip = ("Weights only load failed", "Please file an issue", "Check the documentation")
    for para in (p.strip() for p in text.split("\n\n")):
        if para and not para.startswith(skip):
            return " ".join(para.split())
    return ""


def _torch_load(path: Path, container: str) -> RawCheckpoint:
    origin = str(path)
    try:
        # argparse.Namespace: timm / DeiT training checkpoints keep their command-line args next to the weights;
        # rebuilding one only sets attributes.
        with warnings.catch_warnings(), torch.serialization.safe_globals([argparse.Namespace]):
            warnings.simplefilter("ignore")
            obj = torch.load(origin, map_location="cpu", weights_only=True)
    except Exception as e:  # torch.load raises many types (UnpicklingError, RuntimeError, IndexError, struct.error)
        text = str(e)
        detail = _unpickler_complaint(text)
        low = text.lower()
        if isinstance(e, (EOFError, IndexError, struct.error)) or any(s in low for s in ("truncated", "ran out of input", "central directory",
                                                             "unexpected eof", "failed reading")):
            raise _err(origin, f"truncated or corrupt file ({detail or 'unexpected end of data'})") from None
        m = re.search(r"[Uu]nsupported (?:global: )?GLOBAL ([\w.]+)", text)
        if m or "Unsupported class" in text:
            what = f" ({m.group(1)})" if m else ""
            raise _err(origin, f"refused: unpickling this file would import and call Python code{what}; vitviz only "
                               "reads tensors and plain containers (torch.load with weights_only=True). If it is a "
                               "whole pickled model from a source you trust, re-save its state_dict() or convert it "
                               "to safetensors.") from None
        if "Unsupported operand" in text or "magic number" in low:
            raise _err(origin, "not a checkpoint: a plain Python pickle, not a file written by torch.save") from None
        raise _err(origin, f"not a readable torch checkpoint ({detail or type(e).__name__})") from None
    return RawCheckpoint(tensors=_unwrap_state_dict(obj, origin), origin=origin, container=container)


def _read_npz(path: Path) -> RawCheckpoint:
    try:
        with np.load(str(path), allow_pickle=False) as z:
            arrays = {k: np.asarray(z[k]) for k in z.files}
    except ValueError as e:  # object arrays need pickle
        raise _err(str(path), f"refused: the .npz holds pickled objects ({e})") from None
    except (zipfile.BadZipFile, EOFError, OSError) as e:
        raise _err(str(path), f"truncated or corrupt .npz archive ({e})") from None
    tensors = {}
    for k, a in arrays.items():
        if a.dtype.kind not in "fiub":
            raise _err(str(path), f"array {k!r} has dtype {a.dtype}, not a number type")
        tensors[k] = torch.from_numpy(np.ascontiguousarray(a))
    return RawCheckpoint(tensors=tensors, origin=str(path), container="npz")


_WRAPPER_KEYS = ("state_dict", "model", "model_state_dict", "module", "model_state", "net", "params")


def _unwrap_state_dict(obj: Any, origin: str) -> dict[str, torch.Tensor]:
    """Find the state dict inside a loaded object (bare state dict, or ``{"model": ...}`` / ``{"state_dict": ...}``)."""
    for _ in range(3):
        if isinstance(obj, Mapping) and not any(isinstance(v, torch.Tensor) for v in obj.values()):
            inner = next((obj[k] for k in _WRAPPER_KEYS if k in obj and isinstance(obj[k], Mapping)), None)
            if inner is None:
                break
            obj = inner
    if not isinstance(obj, Mapping):
        raise _err(origin, f"not a checkpoint: it holds a {type(obj).__name__}, not a dict of tensors")
    tensors = {str(k): v for k, v in obj.items() if isinstance(v, torch.Tensor)}
    if not tensors:
        raise _err(origin, f"not a checkpoint: no tensors found (top-level keys: {_names(list(obj)[:10])})")
    if all(k.startswith("module.") for k in tensors):  # DataParallel / DDP
        tensors = {k[len("module."):]: v for k, v in tensors.items()}
    return tensors


def _read_file(path: Path) -> RawCheckpoint:
    if not path.exists():
        raise _err(str(path), "no such file or directory")
    size = path.stat().st_size
    if size == 0:
        raise _err(str(path), "not a checkpoint: the file is empty")
    with open(path, "rb") as f:
        head = f.read(16)
    if head[:4] == b"PK\x03\x04" or head[:4] == b"PK\x05\x06":
        try:
            with zipfile.ZipFile(path) as z:
                names = z.namelist()
        except (zipfile.BadZipFile, OSError) as e:
            raise _err(str(path), f"truncated or corrupt file: the zip archive cannot be read ({e})") from None
        if names and all(n.endswith(".npy") for n in names):
            return _read_npz(path)
        if any(n.endswith("constants.pkl") or "/code/" in n for n in names):
            raise _err(str(path), "a TorchScript archive (torch.jit.save) is not supported: save the model's "
                                  "state_dict() with torch.save or safetensors instead")
        if any(n.endswith("data.pkl") for n in names):
            return _torch_load(path, "torch")
        raise _err(str(path), f"not a checkpoint: a zip archive holding {_names(names[:6])}")
    if head[:2] == b"\x80\x02" or head[:1] == b"\x80":
        return _torch_load(path, "torch-legacy")
    if size >= 8:
        (n,) = struct.unpack("<Q", head[:8])
        if 0 < n < 100_000_000 and head[8:9] == b"{":
            return _read_safetensors(path)
    kinds = "safetensors, torch .pth/.bin/.pt (zip or legacy pickle), numpy .npz, or a Hugging Face directory"
    raise _err(str(path), f"not a checkpoint: the file is neither of {kinds}")


def _read_dir(path: Path) -> RawCheckpoint:
    cfg_path = path / "config.json"
    candidates = ["model.safetensors", "pytorch_model.bin"]
    weights = next((path / c for c in candidates if (path / c).is_file()), None)
    if weights is None:
        shards = sorted(path.glob("model-*-of-*.safetensors")) + sorted(path.glob("pytorch_model-*-of-*.bin"))
        if shards:
            raise _err(str(path), f"sharded checkpoints ({shards[0].name} ...) are not supported; merge the shards "
                                  "into one model.safetensors")
        files = [p.name for p in path.iterdir()][:10]
        raise _err(str(path), f"directory holds no model.safetensors or pytorch_model.bin (found: {_names(files)})")
    raw = _read_file(weights)
    raw.origin = str(path)
    if cfg_path.is_file():
        try:
            raw.hf_config = json.loads(cfg_path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise _err(str(cfg_path), f"cannot read config.json ({e})") from None
    pp = path / "preprocessor_config.json"
    if pp.is_file():
        try:
            raw.hf_preprocessor = json.loads(pp.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise _err(str(pp), f"cannot read preprocessor_config.json ({e})") from None
    return raw


def read_raw(source: str | os.PathLike[str] | Mapping[str, Any]) -> RawCheckpoint:
    """Read ``source`` (file, directory or state dict) into a :class:`RawCheckpoint` without converting it."""
    if isinstance(source, Mapping):
        return RawCheckpoint(tensors=_unwrap_state_dict(source, "<state dict>"), origin="<state dict>",
                             container="dict")
    path = Path(source).expanduser()
    if path.is_dir():
        return _read_dir(path)
    return _read_file(path)


# ---------------------------------------------------------------------------------------------------------------------
# format detection
# ---------------------------------------------------------------------------------------------------------------------
def _strip_hf_prefix(keys: Sequence[str]) -> str | None:
    for prefix in ("vit.", ""):
        if f"{prefix}embeddings.patch_embeddings.projection.weight" in keys:
            return prefix
    return None


def detect_format(raw: RawCheckpoint) -> Format:
    """The checkpoint format, from metadata and keys; raises :class:`CheckpointError` listing the formats tried."""
    keys = raw.tensors.keys()
    if _SPEC_KEY in raw.metadata:
        return "native"
    if "patch_embed.proj.weight" in keys and any(k.startswith("blocks.") for k in keys):
        return "timm"
    if "conv_proj.weight" in keys and any(k.startswith("encoder.layers.encoder_layer_") for k in keys):
        return "torchvision"
    if _strip_hf_prefix(list(keys)) is not None:
        return "hf"
    if _npz_prefix(keys) is not None:
        return "npz"
    sample = _names(sorted(keys)[:8])
    raise _err(raw.origin, f"unknown checkpoint format: the keys ({sample}, {len(keys)} in all) match none of the "
                           f"formats tried: native vitviz (safetensors metadata), timm (patch_embed.proj.weight), "
                           f"torchvision (conv_proj.weight), Hugging Face (embeddings.patch_embeddings.projection), "
                           f"Google npz (embedding/kernel)")


def _names(keys: Sequence[str], limit: int = 8) -> str:
    keys = list(keys)
    shown = ", ".join(repr(k) for k in keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


# ---------------------------------------------------------------------------------------------------------------------
# conversion to our (timm) names
# ---------------------------------------------------------------------------------------------------------------------
@dataclass
class Converted:
    """A state dict in our names plus what the source said about the architecture.

    Attributes:
        state: our parameter name -> tensor.
        source_names: our parameter name -> the source's name (for messages).
        unused: source keys the converter did not recognise (reported as unexpected).
        config: known config values (``num_heads``, ``layer_norm_eps``, ``img_size`` ...).
    """

    state: dict[str, torch.Tensor]
    source_names: dict[str, str]
    unused: list[str]
    config: dict[str, Any] = field(default_factory=dict)


def _rename(tensors: Mapping[str, torch.Tensor], rules: Sequence[tuple[str, str]],
            ignore: Sequence[str] = ()) -> Converted:
    """Apply regex rename ``rules`` (first match wins); keys matching no rule and no ``ignore`` pattern are unused."""
    compiled = [(re.compile(p), r) for p, r in rules]
    ign = [re.compile(p) for p in ignore]
    state, names, unused = {}, {}, []
    for k, v in tensors.items():
        for pat, rep in compiled:
            if pat.fullmatch(k):
                new = pat.sub(rep, k)
                state[new] = v
                names[new] = k
                break
        else:
            if not any(p.fullmatch(k) for p in ign):
                unused.append(k)
    return Converted(state, names, unused)


def _convert_timm(raw: RawCheckpoint) -> Converted:
    return _rename(raw.tensors, [(r"(.*)", r"\1")])


def _convert_native(raw: RawCheckpoint) -> Converted:
    c = _convert_timm(raw)
    try:
        spec = ModelSpec.from_json(raw.metadata[_SPEC_KEY])
    except (ValueError, KeyError, TypeError) as e:
        raise _err(raw.origin, f"corrupt vitviz metadata ({e})") from None
    c.config["spec"] = spec
    return c


def _convert_torchvision(raw: RawCheckpoint) -> Converted:
    L = r"encoder\.layers\.encoder_layer_(\d+)\."
    rules = [
        (r"conv_proj\.(weight|bias)", r"patch_embed.proj.\1"),
        (r"class_token", r"cls_token"),
        (r"encoder\.pos_embedding", r"pos_embed"),
        (L + r"ln_1\.(weight|bias)", r"blocks.\1.norm1.\2"),
        (L + r"self_attention\.in_proj_(weight|bias)", r"blocks.\1.attn.qkv.\2"),
        (L + r"self_attention\.out_proj\.(weight|bias)", r"blocks.\1.attn.proj.\2"),
        (L + r"ln_2\.(weight|bias)", r"blocks.\1.norm2.\2"),
        (L + r"mlp\.(?:linear_1|0)\.(weight|bias)", r"blocks.\1.mlp.fc1.\2"),
        (L + r"mlp\.(?:linear_2|3)\.(weight|bias)", r"blocks.\1.mlp.fc2.\2"),
        (r"encoder\.ln\.(weight|bias)", r"norm.\1"),
        (r"heads\.head\.(weight|bias)", r"head.\1"),
    ]
    c = _rename(raw.tensors, rules)
    c.config["layer_norm_eps"] = 1e-6
    return c


def _convert_hf(raw: RawCheckpoint) -> Converted:
    keys = list(raw.tensors)
    p = re.escape(_strip_hf_prefix(keys) or "")
    old = p + r"encoder\.layer\.(\d+)\."
    new = p + r"layers\.(\d+)\."
    rules = [
        (p + r"embeddings\.patch_embeddings\.projection\.(weight|bias)", r"patch_embed.proj.\1"),
        (p + r"embeddings\.cls_token", "cls_token"),
        (p + r"embeddings\.position_embeddings", "pos_embed"),
        (old + r"attention\.output\.dense\.(weight|bias)", r"blocks.\1.attn.proj.\2"),
        (old + r"layernorm_before\.(weight|bias)", r"blocks.\1.norm1.\2"),
        (old + r"layernorm_after\.(weight|bias)", r"blocks.\1.norm2.\2"),
        (old + r"intermediate\.dense\.(weight|bias)", r"blocks.\1.mlp.fc1.\2"),
        (old + r"output\.dense\.(weight|bias)", r"blocks.\1.mlp.fc2.\2"),
        (new + r"attention\.o_proj\.(weight|bias)", r"blocks.\1.attn.proj.\2"),
        (new + r"layernorm_before\.(weight|bias)", r"blocks.\1.norm1.\2"),
        (new + r"layernorm_after\.(weight|bias)", r"blocks.\1.norm2.\2"),
        (new + r"mlp\.fc1\.(weight|bias)", r"blocks.\1.mlp.fc1.\2"),
        (new + r"mlp\.fc2\.(weight|bias)", r"blocks.\1.mlp.fc2.\2"),
        (p + r"layernorm\.(weight|bias)", r"norm.\1"),
        (r"classifier\.(weight|bias)", r"head.\1"),
    ]
    qkv_pats = [re.compile(old + r"attention\.attention\.(query|key|value)\.(weight|bias)"),
                re.compile(new + r"attention\.(q|k|v)_proj\.(weight|bias)")]
    ignore = [p + r"embeddings\.mask_token", p + r"pooler\.dense\.(weight|bias)"]
    rest, parts = {}, {}
    for k, v in raw.tensors.items():
        m = next((pat.fullmatch(k) for pat in qkv_pats if pat.fullmatch(k)), None)
        if m:
            parts[(int(m.group(1)), m.group(3), m.group(2)[0])] = (k, v)  # (block, weight|bias, q|k|v)
        else:
            rest[k] = v
    c = _rename(rest, rules, ignore)
    for i, kind in sorted({(i, kind) for (i, kind, _) in parts}):  # kind: "weight" / "bias"
        trio = [parts.get((i, kind, w)) for w in "qkv"]
        if any(t is None for t in trio):
            have = [t[0] for t in trio if t is not None]
            raise _err(raw.origin, f"missing keys: block {i} has only {_names(have)} of query/key/value {kind}")
        name = f"blocks.{i}.attn.qkv.{kind}"
        try:
            c.state[name] = torch.cat([t[1] for t in trio], dim=0)
        except RuntimeError:
            shapes = [tuple(t[1].shape) for t in trio]
            raise _err(raw.origin, f"shape mismatch: query/key/value {kind} of block {i} have shapes {shapes}") \
                from None
        c.source_names[name] = trio[0][0].replace("query", "query/key/value").replace("q_proj", "q/k/v_proj")
    cfg = raw.hf_config or {}
    if cfg:
        act = cfg.get("hidden_act", "gelu")
        if act != "gelu":
            raise _err(raw.origin, f"unsupported activation hidden_act={act!r} in config.json (vitviz uses exact GELU)")
        if "num_attention_heads" in cfg:
            c.config["num_heads"] = int(cfg["num_attention_heads"])
        c.config["layer_norm_eps"] = float(cfg.get("layer_norm_eps", 1e-12))
        id2label = cfg.get("id2label")
        if isinstance(id2label, Mapping) and id2label:
            try:
                labels = [str(id2label[str(i)] if str(i) in id2label else id2label[i]) for i in range(len(id2label))]
            except KeyError:
                labels = None
            if labels and not all(re.fullmatch(r"LABEL_\d+", s) for s in labels):
                c.config["labels"] = tuple(labels)
    else:
        c.config["layer_norm_eps"] = 1e-12  # transformers' ViTConfig default
    return c


_NPZ_PREFIXES = ("", "opt/target/", "params/", "params/img/")


def _npz_prefix(keys: Any) -> str | None:
    """The prefix of Google-layout keys (``""``, ``"opt/target/"``, ``"params/"``, ``"params/img/"``), or None."""
    keys = set(keys)
    for p in _NPZ_PREFIXES:
        if f"{p}embedding/kernel" in keys and any(k.startswith(f"{p}Transformer/") for k in keys):
            return p
    return None


def _convert_npz(raw: RawCheckpoint) -> Converted:
    prefix = _npz_prefix(raw.tensors) or ""
    t = {k[len(prefix):]: v for k, v in raw.tensors.items() if k.startswith(prefix)}
    used: set[str] = set()
    state: dict[str, torch.Tensor] = {}
    names: dict[str, str] = {}
    heads_found: list[int] = []

    def take(src: str, dst: str, fn: Callable[[torch.Tensor], torch.Tensor] = lambda x: x, *,
             stacked_index: int | None = None) -> None:
        if src not in t:
            return
        v = t[src]
        if stacked_index is not None:
            v = v[stacked_index]
        try:
            state[dst] = fn(v.float()).contiguous()
        except RuntimeError as e:
            raise _err(raw.origin, f"shape mismatch: {src!r} has shape {tuple(v.shape)} ({e})") from None
        names[dst] = src
        used.add(src)

    take("embedding/kernel", "patch_embed.proj.weight", lambda k: k.permute(3, 2, 0, 1))  # HWIO -> OIHW
    take("embedding/bias", "patch_embed.proj.bias")
    take("cls", "cls_token")
    take("Transformer/posembed_input/pos_embedding", "pos_embed")
    take("pos_embedding", "pos_embed")
    take("Transformer/encoder_norm/scale", "norm.weight")
    take("Transformer/encoder_norm/bias", "norm.bias")
    take("head/kernel", "head.weight", lambda k: k.t())
    take("head/bias", "head.bias")

    keys = list(t)
    stacked = any(k.startswith("Transformer/encoderblock/") for k in keys)
    big_vision = any(re.match(r"Transformer/encoderblock(_0)?/MlpBlock_0/", k) for k in keys)
    mha, mlp, ln1, ln2 = ("MultiHeadDotProductAttention_0", "MlpBlock_0", "LayerNorm_0", "LayerNorm_1") if big_vision \
        else ("MultiHeadDotProductAttention_1", "MlpBlock_3", "LayerNorm_0", "LayerNorm_2")
    if stacked:
        depth = t["Transformer/encoderblock/LayerNorm_0/scale"].shape[0] \
            if "Transformer/encoderblock/LayerNorm_0/scale" in t else 0
        blocks = [(i, "Transformer/encoderblock/", i) for i in range(depth)]
    else:
        idx = sorted({int(m.group(1)) for k in keys if (m := re.match(r"Transformer/encoderblock_(\d+)/", k))})
        blocks = [(i, f"Transformer/encoderblock_{i}/", None) for i in idx]

    for i, pre, si in blocks:
        b = f"blocks.{i}."
        take(pre + f"{ln1}/scale", b + "norm1.weight", stacked_index=si)
        take(pre + f"{ln1}/bias", b + "norm1.bias", stacked_index=si)
        take(pre + f"{ln2}/scale", b + "norm2.weight", stacked_index=si)
        take(pre + f"{ln2}/bias", b + "norm2.bias", stacked_index=si)
        take(pre + f"{mlp}/Dense_0/kernel", b + "mlp.fc1.weight", lambda k: k.t(), stacked_index=si)
        take(pre + f"{mlp}/Dense_0/bias", b + "mlp.fc1.bias", stacked_index=si)
        take(pre + f"{mlp}/Dense_1/kernel", b + "mlp.fc2.weight", lambda k: k.t(), stacked_index=si)
        take(pre + f"{mlp}/Dense_1/bias", b + "mlp.fc2.bias", stacked_index=si)
        # out: kernel [H, hd, D] -> weight [D, H*hd]
        take(pre + f"{mha}/out/kernel", b + "attn.proj.weight", lambda k: k.reshape(-1, k.shape[-1]).t(),
             stacked_index=si)
        take(pre + f"{mha}/out/bias", b + "attn.proj.bias", stacked_index=si)
        # query/key/value: kernel [D, H, hd] -> weight [H*hd, D]; bias [H, hd] -> [H*hd]
        qkv_k = [pre + f"{mha}/{n}/kernel" for n in ("query", "key", "value")]
        qkv_b = [pre + f"{mha}/{n}/bias" for n in ("query", "key", "value")]
        if all(k in t for k in qkv_k):
            ks = [t[k][si] if si is not None else t[k] for k in qkv_k]
            if any(k.ndim != 3 for k in ks):
                raise _err(raw.origin, f"shape mismatch: {qkv_k[0]!r} has shape {tuple(ks[0].shape)}, "
                                       "expected [embed_dim, heads, head_dim]")
            state[b + "attn.qkv.weight"] = torch.cat([k.float().reshape(k.shape[0], -1).t() for k in ks]).contiguous()
            names[b + "attn.qkv.weight"] = qkv_k[0].replace("query", "query|key|value")
            used.update(qkv_k)
            heads_found.append(int(ks[0].shape[1]))
        if all(k in t for k in qkv_b):
            bs = [t[k][si] if si is not None else t[k] for k in qkv_b]
            state[b + "attn.qkv.bias"] = torch.cat([x.float().reshape(-1) for x in bs]).contiguous()
            names[b + "attn.qkv.bias"] = qkv_b[0].replace("query", "query|key|value")
            used.update(qkv_b)
    c = Converted(state=state, source_names={k: prefix + v for k, v in names.items()},
                  unused=[prefix + k for k in keys if k not in used])  # keys outside prefix: optimizer state
    if heads_found:
        c.config["num_heads"] = heads_found[0]
    c.config["layer_norm_eps"] = 1e-6
    return c


_CONVERTERS: dict[str, Callable[[RawCheckpoint], Converted]] = {
    "native": _convert_native, "timm": _convert_timm, "torchvision": _convert_torchvision, "hf": _convert_hf,
    "npz": _convert_npz,
}


# ---------------------------------------------------------------------------------------------------------------------
# architecture inference
# ---------------------------------------------------------------------------------------------------------------------
def _square_side(n: int) -> int | None:
    r = math.isqrt(n)
    return r if r * r == n and r > 0 else None


def infer_config(conv: Converted, origin: str, *, num_heads: int | None = None) -> ViTConfig:
    """Infer a :class:`ViTConfig` from the shapes of a converted (our-names) state dict."""
    s = conv.state
    need = ["patch_embed.proj.weight", "pos_embed"]
    missing = [k for k in need if k not in s]
    if missing:
        raise _err(origin, f"missing keys: {_names(missing)} (cannot infer the architecture without them)")
    w = s["patch_embed.proj.weight"]
    if w.ndim != 4 or w.shape[2] != w.shape[3]:
        raise _err(origin, f"shape mismatch: patch embedding {conv.source_names.get('patch_embed.proj.weight')!r} "
                           f"has shape {tuple(w.shape)}, expected [embed_dim, channels, P, P]")
    embed_dim, in_ch, patch = int(w.shape[0]), int(w.shape[1]), int(w.shape[2])
    depth = len({int(m.group(1)) for k in s if (m := re.match(r"blocks\.(\d+)\.", k))})
    fc1 = s.get("blocks.0.mlp.fc1.weight")
    mlp_ratio = 4.0
    if fc1 is not None:
        hidden = int(fc1.shape[0])
        mlp_ratio = hidden / embed_dim
        if int(embed_dim * mlp_ratio) != hidden:  # float rounding (e.g. 120 / 88): ViT uses int(dim * ratio)
            mlp_ratio = (hidden + 0.5) / embed_dim
    class_token = "cls_token" in s
    distilled = "dist_token" in s
    num_reg = int(s["reg_token"].shape[1]) if "reg_token" in s else 0
    prefix = int(class_token) + int(distilled) + num_reg
    pe = s["pos_embed"]
    if pe.ndim != 3 or pe.shape[0] != 1 or pe.shape[2] != embed_dim:
        raise _err(origin, f"shape mismatch: position embedding {conv.source_names.get('pos_embed')!r} has shape "
                           f"{tuple(pe.shape)}, expected [1, tokens, {embed_dim}]")
    n_pos = int(pe.shape[1])
    no_embed_class = False
    side = _square_side(n_pos - prefix) if n_pos > prefix else None
    if side is None and prefix and _square_side(n_pos):
        side, no_embed_class = _square_side(n_pos), True
    if side is None:
        raise _err(origin, f"position embedding has {n_pos} slots: with {prefix} prefix tokens that is not a square "
                           "patch grid (non-square grids are only supported in native vitviz checkpoints)")
    head = s.get("head.weight")
    num_classes = int(head.shape[0]) if head is not None and head.ndim == 2 else 0
    fc_norm = "fc_norm.weight" in s
    global_pool = "avg" if (fc_norm or not class_token) else "token"
    heads = num_heads or conv.config.get("num_heads") or KNOWN_HEADS.get(embed_dim) or (
        embed_dim // 64 if embed_dim % 64 == 0 else None)
    if not heads:
        raise _err(origin, f"cannot infer the number of attention heads for embed_dim={embed_dim} (not a multiple "
                           "of head_dim 64); pass num_heads=...")
    if embed_dim % heads:
        raise _err(origin, f"num_heads={heads} does not divide embed_dim={embed_dim}")
    return ViTConfig(
        img_size=(side * patch, side * patch), patch_size=patch, in_channels=in_ch, num_classes=num_classes,
        embed_dim=embed_dim, depth=depth, num_heads=int(heads), mlp_ratio=mlp_ratio,
        qkv_bias="blocks.0.attn.qkv.bias" in s or depth == 0, class_token=class_token, num_reg_tokens=num_reg,
        distilled=distilled, global_pool=global_pool,  # type: ignore[arg-type]
        layer_norm_eps=float(conv.config.get("layer_norm_eps", 1e-6)), fc_norm=fc_norm,
        no_embed_class=no_embed_class, init_values=1.0 if "blocks.0.ls1.gamma" in s else None,
    )


# ---------------------------------------------------------------------------------------------------------------------
# preprocessing and labels
# ---------------------------------------------------------------------------------------------------------------------
def resolve_preprocess(arg: PreprocessArg, size: tuple[int, int]) -> Preprocess | None:
    """``"imagenet"`` / ``"inception"`` (mean = std = 0.5) / a :class:`Preprocess` / None -> a Preprocess or None."""
    if arg is None or isinstance(arg, Preprocess):
        return arg
    if arg not in ("imagenet", "inception"):
        raise ValueError(f"preprocess={arg!r}; valid: a Preprocess, 'imagenet' or 'inception'")
    h, w = size
    if h != w:
        mean, std = (IMAGENET_MEAN, IMAGENET_STD) if arg == "imagenet" else (INCEPTION_MEAN, INCEPTION_STD)
        return Preprocess(resize=size, crop=size, interpolation="bicubic", mean=mean, std=std)
    fn = imagenet_preprocess if arg == "imagenet" else inception_preprocess
    return fn(h, crop_pct=0.875 if h <= 224 else 1.0)


_HF_RESAMPLE = {0: "nearest", 1: "lanczos", 2: "bilinear", 3: "bicubic", 4: "bilinear", 5: "bicubic"}


def _hf_preprocess(pp: Mapping[str, Any] | None, size: tuple[int, int]) -> Preprocess:
    if not pp:
        return Preprocess(resize=size, crop=size, interpolation="bilinear", mean=INCEPTION_MEAN, std=INCEPTION_STD)
    sz = pp.get("size", size)
    if isinstance(sz, Mapping):
        if "height" in sz and "width" in sz:
            rs: int | tuple[int, int] = (int(sz["height"]), int(sz["width"]))
        elif "shortest_edge" in sz:
            rs = int(sz["shortest_edge"])
        else:
            rs = size
    elif isinstance(sz, (int, float)):
        rs = (int(sz), int(sz))
    else:
        rs = size
    if not pp.get("do_resize", True):
        rs = size
    crop = size
    if pp.get("do_center_crop") and "crop_size" in pp:
        cs = pp["crop_size"]
        crop = (int(cs["height"]), int(cs["width"])) if isinstance(cs, Mapping) else (int(cs), int(cs))
    interp = _HF_RESAMPLE.get(int(pp.get("resample", 2)), "bilinear")
    mean = tuple(float(x) for x in pp.get("image_mean", INCEPTION_MEAN)) if pp.get("do_normalize", True) else (0.0,) * 3
    std = tuple(float(x) for x in pp.get("image_std", INCEPTION_STD)) if pp.get("do_normalize", True) else (1.0,) * 3
    return Preprocess(resize=rs, crop=crop, interpolation=interp, mean=mean, std=std)  # type: ignore[arg-type]


def _default_preprocess(fmt: str, cfg: ViTConfig, raw: RawCheckpoint) -> Preprocess:
    size = cfg.img_size
    if fmt == "hf":
        return _hf_preprocess(raw.hf_preprocessor, size)
    if fmt == "torchvision":
        if size == (224, 224):
            return Preprocess(resize=256, crop=size, interpolation="bilinear", mean=IMAGENET_MEAN, std=IMAGENET_STD)
        return Preprocess(resize=size[0] if size[0] == size[1] else size, crop=size, interpolation="bicubic",
                          mean=IMAGENET_MEAN, std=IMAGENET_STD)
    if fmt == "timm" and cfg.distilled:
        return resolve_preprocess("imagenet", size)  # type: ignore[return-value]
    return resolve_preprocess("inception", size)  # type: ignore[return-value]


def imagenet_labels() -> tuple[str, ...] | None:
    """The 1000 ImageNet-1k class names in the standard order (torchvision's list), or None if unavailable."""
    try:
        from torchvision.models._meta import _IMAGENET_CATEGORIES
    except ImportError:  # pragma: no cover - torchvision moved it
        return None
    return tuple(_IMAGENET_CATEGORIES)


# ---------------------------------------------------------------------------------------------------------------------
# the loader
# ---------------------------------------------------------------------------------------------------------------------
def load_checkpoint(
    source: str | os.PathLike[str] | Mapping[str, Any],
    *,
    num_classes: int | None = None,
    img_size: int | tuple[int, int] | None = None,
    num_heads: int | None = None,
    preprocess: PreprocessArg = None,
    labels: Sequence[str] | None = None,
    name: str | None = None,
) -> ViT:
    """Load a ViT from a native, timm, torchvision, Hugging Face or Google ``.npz`` checkpoint.

    Args:
        source: a file (``.safetensors``, ``.pth``/``.pt``/``.bin``, ``.npz``), a Hugging Face directory
            (``config.json`` + ``model.safetensors`` or ``pytorch_model.bin``), or a state dict.
        num_classes: replace the classifier with a freshly initialised one of this size (0: no head, the model
            returns pooled features ``[B, D]``); labels are dropped when the size changes.
        img_size: nominal input size; when it differs from the checkpoint's, the position embeddings are resampled
            bicubically over the patch grid (prefix tokens kept), as timm does.
        num_heads: attention heads, for checkpoints that do not say (timm, torchvision, bare HF weights).
        preprocess: ``"imagenet"``, ``"inception"`` (mean = std = 0.5) or a :class:`Preprocess`; default: the format's
            documented default (see the module docstring).
        labels: class names in head order, overriding what the checkpoint provides.
        name: a display name for ``model.spec.name`` (default: the file name).

    Returns:
        The model in eval mode, with ``model.spec`` set.

    Raises:
        CheckpointError: the file is not a checkpoint, is truncated, has an unknown format, missing or unexpected keys,
            or mismatched shapes; or its pickle would run code.
    """
    raw = read_raw(source)
    fmt = detect_format(raw)
    conv = _CONVERTERS[fmt](raw)
    origin = raw.origin
    saved_spec: ModelSpec | None = conv.config.get("spec")
    if saved_spec is not None:
        cfg = saved_spec.config
        if num_heads is not None:
            cfg = ViTConfig.from_dict({**cfg.to_dict(), "num_heads": num_heads})
    else:
        cfg = infer_config(conv, origin, num_heads=num_heads)
    ckpt_cfg = cfg
    changes: dict[str, Any] = {}
    if img_size is not None:
        from vitviz.model.vit import _pair

        changes["img_size"] = _pair(img_size)
    if num_classes is not None:
        changes["num_classes"] = int(num_classes)
    if changes:
        cfg = ViTConfig.from_dict({**cfg.to_dict(), **changes})
    try:
        with torch.device("meta"):  # no random initialisation: every tensor is overwritten below
            model = ViT.from_config(cfg)
    except ValueError as e:
        raise _err(origin, f"invalid architecture ({e})") from None
    model = model.to_empty(device="cpu")

    state = dict(conv.state)
    # head replaced?
    head_reset = cfg.num_classes != ckpt_cfg.num_classes
    if head_reset:
        for k in [k for k in state if k.startswith(("head.", "head_dist."))]:
            del state[k]
        conv.unused = [k for k in conv.unused if not _PRE_LOGITS.search(k)]
    # resample the position embedding for another input size
    if cfg.img_size != ckpt_cfg.img_size and "pos_embed" in state and cfg.pos_embed == "learned":
        prefix = 0 if cfg.no_embed_class else cfg.num_prefix_tokens
        state["pos_embed"] = resample_pos_embed(state["pos_embed"], cfg.grid_size, ckpt_cfg.grid_size, prefix)
    if cfg.pos_embed == "sincos":  # fixed: recomputed for the grid
        state.pop("pos_embed", None)
    _load_into(model, state, conv, origin, skip_missing=_skip_missing(cfg, head_reset))
    with torch.no_grad():
        if cfg.pos_embed == "sincos":
            model.pos_embed.copy_(model.fixed_pos_embed())
        if head_reset:
            for head in (model.head, model.head_dist):
                if isinstance(head, torch.nn.Linear):
                    torch.nn.init.trunc_normal_(head.weight, std=0.02)
                    torch.nn.init.zeros_(head.bias)
    model.eval()

    size = cfg.img_size
    if isinstance(preprocess, str) or isinstance(preprocess, Preprocess):
        pre = resolve_preprocess(preprocess, size)
    elif saved_spec is not None:
        pre = saved_spec.preprocess
        if size != ckpt_cfg.img_size:
            pre = _rescale_preprocess(pre, size)
    else:
        pre = _default_preprocess(fmt, cfg, raw)
    assert pre is not None
    if labels is not None:
        labs: tuple[str, ...] | None = tuple(str(x) for x in labels)
        if len(labs) != cfg.num_classes:
            raise ValueError(f"labels has {len(labs)} names but the model has {cfg.num_classes} classes")
    elif head_reset:
        labs = None
    elif saved_spec is not None:
        labs = saved_spec.labels
    else:
        labs = conv.config.get("labels")
        if labs is None and cfg.num_classes == 1000:
            labs = imagenet_labels()
    if labs is not None and len(labs) != cfg.num_classes:
        labs = None
    src_path = None if isinstance(source, Mapping) else str(Path(source).expanduser())
    display = name or (saved_spec.name if saved_spec is not None else None) or (
        Path(src_path).name if src_path else f"{fmt} state dict")
    model.spec = ModelSpec(config=cfg, preprocess=pre, labels=labs, source_format=fmt, source_path=src_path,
                           name=display)
    return model


def _rescale_preprocess(pre: Preprocess, size: tuple[int, int]) -> Preprocess:
    """Keep the crop ratio and normalisation of ``pre`` for a new input ``size``."""
    ch, cw = pre.crop
    if isinstance(pre.resize, tuple):
        rh, rw = pre.resize
        resize: int | tuple[int, int] = (round(rh * size[0] / ch), round(rw * size[1] / cw))
    else:
        resize = round(pre.resize * size[0] / ch) if size[0] == size[1] else (
            round(pre.resize * size[0] / ch), round(pre.resize * size[1] / cw))
    return Preprocess(resize=resize, crop=size, interpolation=pre.interpolation, mean=pre.mean, std=pre.std)


_PRE_LOGITS = re.compile(r"pre_logits")


def _skip_missing(cfg: ViTConfig, head_reset: bool) -> set[str]:
    skip = set()
    if head_reset:
        skip |= {"head.weight", "head.bias", "head_dist.weight", "head_dist.bias"}
    if cfg.pos_embed == "sincos":
        skip.add("pos_embed")
    return skip


def _load_into(model: ViT, state: dict[str, torch.Tensor], conv: Converted, origin: str, *,
               skip_missing: set[str]) -> None:
    target = model.state_dict()
    src = conv.source_names
    unexpected = [src.get(k, k) for k in state if k not in target] + list(conv.unused)
    missing = [k for k in target if k not in state and k not in skip_missing]
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing keys {_names(missing)}")
        if unexpected:
            parts.append(f"unexpected keys {_names(unexpected)}")
        hint = " (the checkpoint does not match a supported ViT layout)"
        if any(_PRE_LOGITS.search(k) for k in unexpected):
            hint = (" (a pre-logits representation layer is not supported: load with num_classes=0 to use the "
                    "encoder alone, or num_classes=N for a new head)")
        raise _err(origin, "; ".join(parts) + hint)
    for k, v in state.items():
        if tuple(v.shape) != tuple(target[k].shape):
            raise _err(origin, f"shape mismatch for {src.get(k, k)!r}: the checkpoint has {tuple(v.shape)}, "
                               f"the inferred architecture needs {tuple(target[k].shape)}")
        if not (v.is_floating_point() or v.is_complex()):
            raise _err(origin, f"tensor {src.get(k, k)!r} has dtype {v.dtype}, expected floating point")
    with torch.no_grad():
        for k, p in list(model.named_parameters()) + list(model.named_buffers()):
            if k in state:
                p.copy_(state[k].to(p.dtype))

