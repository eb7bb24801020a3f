"""What every checkpoint format shares: the error type, the raw and converted containers, key renaming, checks of
settings read from files, the memory estimate and architecture inference from tensor shapes. No Qt."""

from __future__ import annotations

import functools
import math
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from vitviz.model.preprocess import IMAGENET_MEAN, IMAGENET_STD, INCEPTION_MEAN, INCEPTION_STD, Preprocess
from vitviz.model.spec import imagenet_preprocess, inception_preprocess
from vitviz.model.vit import ViTConfig
from vitviz.resources import resources_dir

PreprocessArg = Preprocess | Literal["imagenet", "inception"] | None

# ViT paper (Table 1) and DeiT widths -> heads; everything else falls back to head_dim 64.
KNOWN_HEADS: dict[int, int] = {192: 3, 384: 6, 768: 12, 1024: 16, 1280: 16}


class CheckpointError(ValueError):
    """A checkpoint could not be read, converted or written; the message starts with the file and names the problem."""


def err(origin: str | os.PathLike[str], msg: str) -> CheckpointError:
    """A :class:`CheckpointError` whose message is ``"<origin>: <msg>"``."""
    return CheckpointError(f"{origin}: {msg}")


_err = err


def names(keys: Sequence[str], limit: int = 8) -> str:
    """``'a', 'b' and 3 more``: a short quoted list for messages."""
    keys = list(keys)
    shown = ", ".join(repr(k) for k in keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


_names = names


# ---------------------------------------------------------------------------------------------------------------------
# containers
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


@dataclass
class Converted:
    """A state dict in our names plus what the source said about the architecture.

    Attributes:
        state: our parameter name -> tensor.
        source_names: our parameter name -> the source's name (for messages).
        unused: source keys the converter did not recognise (reported as unexpected).
        config: known config values (``num_heads``, ``layer_norm_eps``, ``labels``, ``spec`` ...).
        consumed: source keys read into ``state`` (renamed, fused, folded ...).
        ignored: source keys deliberately left out, each with the reason (a text tower, a pre-training-only token,
            an index buffer recomputed from the grid). Every source key is consumed, ignored or unused:
            :func:`check_every_key_read` refuses a checkpoint with a key in none of them.
    """

    state: dict[str, torch.Tensor]
    source_names: dict[str, str]
    unused: list[str]
    config: dict[str, Any] = field(default_factory=dict)
    consumed: set[str] = field(default_factory=set)
    ignored: dict[str, str] = field(default_factory=dict)

    def consume(self, *keys: str) -> None:
        """Mark source ``keys`` as read (a converter that builds a tensor from several of them)."""
        self.consumed.update(keys)


MASK_TOKEN = "the masked-image-modelling token: used in pre-training only, never on an image"
TEXT_TOWER = "the text tower (read by vitviz.model.text when text prompts are used)"
INDEX_BUFFER = "a fixed index buffer, recomputed from the patch grid"


def check_every_key_read(raw: RawCheckpoint, conv: Converted) -> None:
    """Refuse a checkpoint with a key its converter neither read, nor named as deliberately unused, nor reported as
    unexpected: a part of the model that would otherwise be dropped without a word (the guard of issue 31: a model
    is never opened with a part ignored)."""
    accounted = conv.consumed | set(conv.ignored) | set(conv.unused)
    silent = [k for k in raw.tensors if k not in accounted]
    if silent:
        raise err(raw.origin, f"keys read by no part of vitviz's ViT: {names(silent)} (refused rather than shown "
                              "without them)")


def rename(tensors: Mapping[str, torch.Tensor], rules: Sequence[tuple[str, str]],
           ignore: Mapping[str, str] | None = None) -> Converted:
    """Apply regex rename ``rules`` (first match wins); keys matching an ``ignore`` pattern (pattern -> the reason it
    is not read; checked first) are ignored, keys matching neither are unused."""
    compiled = [(re.compile(p), r) for p, r in rules]
    ign = [(re.compile(p), why) for p, why in (ignore or {}).items()]
    state, source, unused, ignored = {}, {}, [], {}
    for k, v in tensors.items():
        why = next((w for p, w in ign if p.fullmatch(k)), None)
        if why is not None:
            ignored[k] = why
            continue
        for pat, rep in compiled:
            if pat.fullmatch(k):
                new = pat.sub(rep, k)
                state[new] = v
                source[new] = k
                break
        else:
            unused.append(k)
    return Converted(state, source, unused, consumed=set(source.values()), ignored=ignored)


_rename = rename


def block_count(state: Mapping[str, Any]) -> int:
    """The number of distinct ``blocks.<i>.`` indices among ``state``'s keys."""
    return len({int(m.group(1)) for k in state if (m := re.match(r"blocks\.(\d+)\.", k))})


# ---------------------------------------------------------------------------------------------------------------------
# settings read from files: type checks
# ---------------------------------------------------------------------------------------------------------------------
def found(value: Any) -> str:
    """How a wrong value is described in messages: ``the string '4'``, ``true``, ``a list [1, 2]``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    kind = {str: "the string", list: "a list", dict: "an object", int: "the integer", float: "the number"}
    r = repr(value)
    r = r if len(r) <= 60 else r[:57] + "..."
    return f"{kind.get(type(value), 'a ' + type(value).__name__)} {r}"


def bad_field(where: str, fld: str, expected: str, value: Any) -> CheckpointError:
    return err(where, f"setting {fld!r} should be {expected}, found {found(value)}")


def want_int(where: str, fld: str, value: Any, minimum: int = 1) -> int:
    """``value`` as an int >= ``minimum`` (bools refused), else a :class:`CheckpointError` naming the field."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise bad_field(where, fld, f"an integer >= {minimum}", value)
    return value


def want_number(where: str, fld: str, value: Any, *, positive: bool = False, below_one: bool = False) -> float:
    """``value`` as a finite float (optionally > 0, or in [0, 1)), else a :class:`CheckpointError`."""
    ok = not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)
    ok = ok and (not positive or value > 0) and (not below_one or 0 <= value < 1)
    if not ok:
        expected = "a positive number" if positive else "a number in [0, 1)" if below_one else "a number"
        raise bad_field(where, fld, expected, value)
    return float(value)


def want_bool(where: str, fld: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise bad_field(where, fld, "true or false", value)
    return value


def want_str(where: str, fld: str, value: Any, choices: Sequence[str] | None = None) -> str:
    if not isinstance(value, str) or (choices is not None and value not in choices):
        raise bad_field(where, fld, f"one of {names(choices)}" if choices else "a string", value)
    return value


def want_size(where: str, fld: str, value: Any, *, pair_only: bool = False) -> int | tuple[int, int]:
    """A positive int or a ``[height, width]`` pair of positive ints."""
    if isinstance(value, (list, tuple)) and len(value) == 2 and all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
        return (int(value[0]), int(value[1]))
    if not pair_only and isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    expected = "[height, width] (positive integers)" if pair_only else \
        "a positive integer or [height, width] (positive integers)"
    raise bad_field(where, fld, expected, value)


def want_numbers(where: str, fld: str, value: Any, *, positive: bool = False) -> tuple[float, ...]:
    """A non-empty list of finite numbers (each > 0 with ``positive``)."""
    ok = isinstance(value, (list, tuple)) and len(value) > 0 and all(
        not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) and (not positive or v > 0)
        for v in value)
    if not ok:
        raise bad_field(where, fld, f"a list of {'positive ' if positive else ''}numbers", value)
    return tuple(float(v) for v in value)


def want_object(where: str, fld: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise bad_field(where, fld, "an object", value)
    return value


# ---------------------------------------------------------------------------------------------------------------------
# declared sizes vs the tensors in the file, and the memory a model needs
# ---------------------------------------------------------------------------------------------------------------------
def check_declared(cfg: ViTConfig, conv: Converted, origin: str, what: str) -> None:
    """Raise when the sizes declared in ``cfg`` disagree with the shapes of the tensors actually present.

    Args:
        cfg: the declared architecture (e.g. a saved spec).
        conv: the converted tensors.
        origin: the file, for messages.
        what: who declared ``cfg`` (``"the saved settings"``), for messages.
    """
    s, src = conv.state, conv.source_names

    def refuse(decl: str, key: str) -> CheckpointError:
        return err(origin, f"{what} declare {decl}, but {src.get(key, key)!r} has shape {tuple(s[key].shape)}")

    w = s.get("patch_embed.proj.weight")
    if w is not None:
        if w.ndim != 4 or int(w.shape[0]) != cfg.embed_dim:
            raise refuse(f"embed_dim={cfg.embed_dim}", "patch_embed.proj.weight")
        if int(w.shape[1]) != cfg.in_channels:
            raise refuse(f"in_channels={cfg.in_channels}", "patch_embed.proj.weight")
        if tuple(w.shape[2:]) != (cfg.patch_size, cfg.patch_size):
            raise refuse(f"patch_size={cfg.patch_size}", "patch_embed.proj.weight")
    depth = block_count(s)
    if depth != cfg.depth:
        raise err(origin, f"{what} declare depth={cfg.depth}, but the file holds {depth} blocks")
    fc1 = s.get("blocks.0.mlp.fc1.weight")
    if fc1 is not None and fc1.ndim == 2 and int(fc1.shape[0]) != int(cfg.embed_dim * cfg.mlp_ratio):
        raise refuse(f"mlp_ratio={cfg.mlp_ratio:g} (MLP width {int(cfg.embed_dim * cfg.mlp_ratio)})",
                     "blocks.0.mlp.fc1.weight")
    head = s.get("head.weight")
    if head is not None and cfg.num_classes and int(head.shape[0]) != cfg.num_classes:
        raise refuse(f"num_classes={cfg.num_classes}", "head.weight")
    pe = s.get("pos_embed")
    if pe is not None and pe.ndim == 3:
        gh, gw = cfg.img_size[0] // cfg.patch_size, cfg.img_size[1] // cfg.patch_size
        n_pos = gh * gw + (0 if cfg.no_embed_class else cfg.num_prefix_tokens)
        if int(pe.shape[1]) != n_pos:
            raise refuse(f"img_size={list(cfg.img_size)} (patch grid {gh}x{gw}, {n_pos} position slots)", "pos_embed")


def physical_memory() -> int | None:
    """Bytes of physical memory (``os.sysconf``), or None where unknown."""
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):  # pragma: no cover - not POSIX
        return None


def estimate_param_bytes(cfg: ViTConfig) -> float:
    """float32 bytes of the parameters and buffers of ``ViT(cfg)``, computed from the config (floats: never
    overflows)."""
    d, c, p = float(cfg.embed_dim), float(cfg.in_channels), float(cfg.patch_size)
    hidden = d * cfg.mlp_ratio
    gh, gw = cfg.img_size[0] // cfg.patch_size, cfg.img_size[1] // cfg.patch_size
    prefix = cfg.num_prefix_tokens
    n_pos = float(gh) * gw + (0 if cfg.no_embed_class else prefix)
    block = 4 * d * d + 4 * d + 2 * d * hidden + hidden + d + 4 * d + (2 * d if cfg.init_values is not None else 0)
    heads = (2 if cfg.distilled else 1) * (d + 1) * cfg.num_classes
    return 4.0 * (c * p * p * d + d + prefix * d + n_pos * d + cfg.depth * block + 4 * d + heads)


def check_memory(cfg: ViTConfig, origin: str) -> None:
    """Refuse, before anything is allocated, a model whose parameters would not fit in physical memory."""
    need, have = estimate_param_bytes(cfg), physical_memory()
    if have is not None and need > have:
        raise err(origin, f"refused: the model needs about {_gib(need)} for its parameters (embed_dim="
                          f"{cfg.embed_dim}, depth={cfg.depth}, img_size={list(cfg.img_size)}, num_classes="
                          f"{cfg.num_classes}), more than this machine's {_gib(have)} of memory")


def _gib(n: float) -> str:
    return f"{n / 2**30:.3g} GiB" if n < 2**70 else f"{n:.3g} bytes"


# ---------------------------------------------------------------------------------------------------------------------
# architecture inference
# ---------------------------------------------------------------------------------------------------------------------
def square_side(n: int) -> int | None:
    r = math.isqrt(n)
    return r if r * r == n and r > 0 else None


def infer_config(conv: Converted, origin: str, *, num_heads: int | None = None) -> ViTConfig:
    """Infer a :class:`ViTConfig` from the shapes of a converted (our-names) state dict.

    What shapes show is read from them: LayerScale, registers, the [CLS] and distillation tokens, ``norm_pre``,
    ``fc_norm``, the attention-pool head (``attn_pool.latent``; its MLP width), a norm inside the attention
    (``attn.norm``: EVA-02 CLIP), a packed SwiGLU MLP (``fc2`` half as wide as
    ``fc1``), BEiT's relative position tables (per block or shared; their size gives the patch grid when there is no
    absolute position embedding), and the biases of the patch projection and the head. What shapes cannot say (the
    activation, LayerNorm eps, the position-embedding resampling of the reference ...) the format's ``convert`` puts
    in ``conv.config["options"]`` (ViTConfig fields), from the checkpoint's config or the family's default.
    """
    s = conv.state
    options: dict[str, Any] = dict(conv.config.get("options", {}))
    w = s.get("patch_embed.proj.weight")
    if w is None:
        raise err(origin, "missing keys: 'patch_embed.proj.weight' (cannot infer the architecture without it)")
    if w.ndim != 4 or w.shape[2] != w.shape[3]:
        raise err(origin, f"shape mismatch: patch embedding {conv.source_names.get('patch_embed.proj.weight')!r} "
                          f"has shape {tuple(w.shape)}, expected [embed_dim, channels, P, P]")
    embed_dim, in_ch, patch = int(w.shape[0]), int(w.shape[1]), int(w.shape[2])
    depth = block_count(s)
    fc1, fc2 = s.get("blocks.0.mlp.fc1.weight"), s.get("blocks.0.mlp.fc2.weight")
    mlp_ratio = 4.0
    mlp_layer = "mlp"
    if fc1 is not None:
        hidden = int(fc1.shape[0])
        if fc2 is not None and fc2.ndim == 2 and fc1.ndim == 2 and int(fc2.shape[1]) * 2 == hidden:
            mlp_layer = "swiglu"  # packed value + gate in fc1 (DINOv2 giant)
        mlp_ratio = hidden / embed_dim
        if int(embed_dim * mlp_ratio) != hidden:  # float rounding (e.g. 120 / 88): ViT uses int(dim * ratio)
            mlp_ratio = (hidden + 0.5) / embed_dim
    class_token = "cls_token" in s
    distilled = "dist_token" in s
    num_reg = int(s["reg_token"].shape[1]) if "reg_token" in s else 0
    prefix = int(class_token) + int(distilled) + num_reg
    rel_pos = "shared" if "rel_pos_bias.relative_position_bias_table" in s else \
        "layer" if "blocks.0.attn.relative_position_bias_table" in s else "none"
    no_embed_class = False
    pe = s.get("pos_embed")
    if pe is not None:
        if pe.ndim != 3 or pe.shape[0] != 1 or pe.shape[2] != embed_dim:
            raise err(origin, f"shape mismatch: position embedding {conv.source_names.get('pos_embed')!r} has shape "
                              f"{tuple(pe.shape)}, expected [1, tokens, {embed_dim}]")
        n_pos = int(pe.shape[1])
        side = square_side(n_pos - prefix) if n_pos > prefix and not options.get("no_embed_class") else None
        if side is None and prefix and square_side(n_pos):
            side, no_embed_class = square_side(n_pos), True
        if side is None:
            raise err(origin, f"position embedding has {n_pos} slots: with {prefix} prefix tokens that is not a "
                              "square patch grid (non-square grids are only supported in native vitviz checkpoints)")
        grid = (side, side)
    elif rel_pos != "none":
        key = "rel_pos_bias.relative_position_bias_table" if rel_pos == "shared" else \
            "blocks.0.attn.relative_position_bias_table"
        rows = int(s[key].shape[0]) - 3
        r = square_side(rows) if rows > 0 else None
        if r is None or r % 2 == 0:
            raise err(origin, f"relative position table {conv.source_names.get(key, key)!r} has shape "
                              f"{tuple(s[key].shape)}: not (2g-1)^2 + 3 rows of a square patch grid")
        grid = ((r + 1) // 2, (r + 1) // 2)
        options.setdefault("pos_embed", "none")
    elif (options.get("rope", "none") != "none" or options.get("pos_embed") == "sincos") and \
            "image_size" in conv.config:  # RoPE alone (DINOv3) or a fixed sin-cos grid (AIMv2 native): the
        grid = (0, 0)  # config's input size, below
        options.setdefault("pos_embed", "none")
    else:
        raise err(origin, "missing keys: 'pos_embed' (cannot infer the input size without a position embedding "
                          "or a relative position table)")
    if "image_size" in conv.config:  # a config that says more than the shapes (non-square grids)
        grid = (conv.config["image_size"][0] // patch, conv.config["image_size"][1] // patch)
    head = s.get("head.weight")
    num_classes = int(head.shape[0]) if head is not None and head.ndim == 2 else 0
    fc_norm = "fc_norm.weight" in s
    attn_pool = "attn_pool.latent" in s
    pool_fc1 = s.get("attn_pool.mlp.fc1.weight")
    pool_mlp_ratio = None  # the pool's MLP width when it differs from the blocks' (PE core gigantic)
    if pool_fc1 is not None and pool_fc1.ndim == 2 and int(pool_fc1.shape[0]) != int(embed_dim * mlp_ratio):
        pool_mlp_ratio = int(pool_fc1.shape[0]) / embed_dim
        if int(embed_dim * pool_mlp_ratio) != int(pool_fc1.shape[0]):
            pool_mlp_ratio = (int(pool_fc1.shape[0]) + 0.5) / embed_dim
    global_pool = "map" if attn_pool else "avg" if (fc_norm or not class_token) else "token"
    heads = num_heads or conv.config.get("num_heads") or KNOWN_HEADS.get(embed_dim) or (
        embed_dim // 64 if embed_dim % 64 == 0 else None)
    if not heads:
        raise err(origin, f"cannot infer the number of attention heads for embed_dim={embed_dim} (not a multiple "
                          "of head_dim 64); pass num_heads=...")
    if embed_dim % heads:
        raise err(origin, f"num_heads={heads} does not divide embed_dim={embed_dim}")
    fields_ = dict(
        img_size=(grid[0] * patch, grid[1] * patch), patch_size=patch, in_channels=in_ch, num_classes=num_classes,
        embed_dim=embed_dim, depth=depth, num_heads=int(heads), mlp_ratio=mlp_ratio,
        qkv_bias="blocks.0.attn.qkv.bias" in s or depth == 0, class_token=class_token, num_reg_tokens=num_reg,
        distilled=distilled, global_pool=global_pool,
        layer_norm_eps=float(conv.config.get("layer_norm_eps", 1e-6)), fc_norm=fc_norm,
        no_embed_class=no_embed_class, init_values=1.0 if "blocks.0.ls1.gamma" in s else None,
        mlp_layer=mlp_layer, pre_norm="norm_pre.weight" in s, patch_bias="patch_embed.proj.bias" in s,
        head_bias=head is None or "head.bias" in s, rel_pos_bias=rel_pos,
        embed_norm="patch_embed.norm.weight" in s, proj_bias="blocks.0.attn.proj.bias" in s or depth == 0,
        attn_norm="blocks.0.attn.norm.weight" in s, pool_mlp_ratio=pool_mlp_ratio,
    )
    fields_.update(options)
    try:
        return ViTConfig(**fields_)  # type: ignore[arg-type]
    except TypeError as e:  # pragma: no cover - a converter's option that is no ViTConfig field: a bug
        raise err(origin, f"invalid architecture options ({e})") from None


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


def imagenet_labels() -> tuple[str, ...] | None:
    """The 1000 ImageNet-1k class names in the standard order (torchvision's list, shipped as
    ``resources/labels/imagenet-1k.txt`` and checked against torchvision in a test: importing torchvision costs ~2 s
    on every load of a 1000-class checkpoint), or None if unavailable."""
    return _imagenet_labels()


@functools.lru_cache(maxsize=1)
def _imagenet_labels() -> tuple[str, ...] | None:
    try:
        lines = (resources_dir() / "labels" / "imagenet-1k.txt").read_text(encoding="utf-8").splitlines()
    except OSError:  # pragma: no cover - a broken install: fall back to torchvision's own list
        try:
            from torchvision.models._meta import _IMAGENET_CATEGORIES
        except ImportError:
            return None
        return tuple(_IMAGENET_CATEGORIES)
    return tuple(lines) if len(lines) == 1000 else None
