"""High-norm "artefact" tokens (Darcet et al. 2023, "Vision Transformers Need Registers"), their exclusion from the
attention, and the attention share of registers and artefacts. No Qt.

Darcet et al. found that supervised, CLIP and DINOv2 ViTs repurpose a few low-information patch tokens (usually
background) as global scratch space: from the middle of the network on, these tokens' output norms are an order of
magnitude above the other patches', they hold little local information, and the [CLS] token (and the patches) attend
to them heavily, which swamps attention maps and every product of them (rollout, relevance). Models trained with
extra *register* tokens move that role to the registers.

Shapes: ``tokens [L+1, N, D]`` (``tokens[0]`` the embeddings, ``tokens[l+1]`` the output of block ``l``), ``attn`` and
``grads [L, H, N, N]``; each also with a leading batch dimension (``[B, L+1, N, D]``, ``[B, L, H, N, N]``; of a
:class:`~vitviz.capture.Capture`: ``capture.tokens.transpose(0, 1)``, ``capture.attentions.transpose(0, 1)``). Tokens:
``p = num_prefix_tokens`` prefix tokens ([CLS], optional distillation token, then the registers: timm's layout, see
:mod:`vitviz.model.vit`), then ``P = gh * gw`` patches. Patch masks are bool ``[P]`` (or ``[B, P]``), patch ``k``
being token ``p + k``.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

import torch

from vitviz.analysis.attention_maps import check_grads
from vitviz.analysis.basics import as_float, as_floating, check_attn, compute_dtype, with_batch_dim

__all__ = [
    "ArtefactTokens", "artefact_attention_share", "exclude_tokens", "high_norm_tokens", "register_attention_share",
    "token_norms",
]

DEFAULT_RATIO = 3.0
DEFAULT_MIN_Z = 6.0
DEFAULT_MAX_FRACTION = 0.1
_MAD_TO_SIGMA = 1.4826  # MAD of a normal distribution times this is its standard deviation


def token_norms(tokens: Any) -> torch.Tensor:
    """L2 norm of every token: ``norms[l, n] = sqrt(sum_d tokens[l, n, d]^2)``.

    Args:
        tokens: ``[L+1, N, D]`` (or ``[B, L+1, N, D]``); float16/bfloat16 are promoted to float32 first (a float16
            sum of squares overflows at norms above 256).

    Returns:
        ``[L+1, N]`` (or ``[B, L+1, N]``) float32 (float64 for float64 input).
    """
    t, batched = with_batch_dim(as_float(tokens, "tokens"), 3, "tokens", "L+1, N, D")
    n = torch.linalg.vector_norm(t, dim=-1)
    return n if batched else n[0]


@dataclass(frozen=True)
class ArtefactTokens:
    """The high-norm patch tokens of one image (or a batch), see :func:`high_norm_tokens`.

    Attributes:
        mask: bool ``[P]`` (or ``[B, P]``) over the patch tokens, row-major over the ``gh x gw`` grid; True = flagged.
        layers: the indices into ``tokens``' first dimension that were tested (0 = embeddings, ``l+1`` = block ``l``).
        ratio: the threshold: flagged patches' norm exceeded ``ratio x`` the median patch norm.
        norms: ``[len(layers), P]`` (or ``[B, len(layers), P]``) the patch tokens' norms at those layers.
        median: ``[len(layers)]`` (or ``[B, len(layers)]``) the median patch norm per layer.
        score: ``[P]`` (or ``[B, P]``) ``max_l norms / median`` over the layers tested (what the cap ranks by).
        min_z: the robust z-score guard used (None: off).
        max_fraction: at most ``floor(max_fraction * P)`` patches are flagged.
    """

    mask: torch.Tensor
    layers: tuple[int, ...]
    ratio: float
    norms: torch.Tensor
    median: torch.Tensor
    score: torch.Tensor
    min_z: float | None
    max_fraction: float

    @property
    def indices(self) -> list[int] | list[list[int]]:
        """Flagged patch indices, ascending (one list per image for a batch)."""
        if self.mask.ndim == 1:
            return [int(i) for i in torch.nonzero(self.mask).flatten()]
        return [[int(i) for i in torch.nonzero(m).flatten()] for m in self.mask]


def default_layers(num_blocks: int) -> tuple[int, ...]:
    """The token indices :func:`high_norm_tokens` tests by default: the outputs of the later half of the blocks,
    ``tokens[L+1-ceil(L/2)] .. tokens[L]`` (ViT-B/16, 12 blocks: ``tokens[7..12]``, blocks 6..11); ``(0,)`` without
    blocks."""
    if num_blocks <= 0:
        return (0,)
    n = (num_blocks + 1) // 2
    return tuple(range(num_blocks + 1 - n, num_blocks + 1))


def high_norm_tokens(
    tokens: Any,
    *,
    num_prefix_tokens: int,
    layers: Sequence[int] | None = None,
    ratio: float = DEFAULT_RATIO,
    min_z: float | None = DEFAULT_MIN_Z,
    max_fraction: float = DEFAULT_MAX_FRACTION,
) -> ArtefactTokens:
    """Flag the high-norm ("artefact") patch tokens of Darcet et al. 2023.

    Rule, per image and per tested layer ``l`` (``n_k`` = norm of patch ``k``, ``med`` / ``mad`` = median and median
    absolute deviation of the image's patch norms at ``l``; for an even count the lower middle value, as
    ``torch.median``)::

        outlier_l(k) = n_k > ratio * med   and   (n_k - med) / (1.4826 * mad) > min_z

    A patch is flagged when it is an outlier at any tested layer; if more than ``floor(max_fraction * P)`` patches
    are, only that many are kept, largest ``score = max_l n_k / med`` first (ties: lower index). Prefix tokens
    ([CLS], registers) are never tested. A layer whose median patch norm is 0 flags nothing.

    Why these defaults:

    * ``layers`` = the later half of the blocks' outputs: Darcet et al. observe the outliers appear around the middle
      of the network and persist to the output (on ViT-Ti/16 augreg from block 7 on, at 10-45x the median); the
      embeddings' and early blocks' norm differences follow the pixels (a saturated patch reaches ~2x the median at
      the embedding), not the artefact mechanism. Testing several layers instead of the last alone still finds the
      tokens if the last block rescales them.
    * ``ratio = 3``: the artefacts are ~an order of magnitude above the median (10-45x on the real ViT-Ti, the
      paper's histograms show the same for larger models), while ordinary patches stay below ~1.5x in the later
      blocks and below ~2.1x anywhere; Gaussian tokens (D >= 8) stay below ~2x. 3 leaves a margin on both sides.
    * ``min_z = 6``: when the norms are broadly spread (few dimensions, heavy tails) 3x the median is an ordinary
      tail value; requiring it also to lie > 6 robust standard deviations above the median keeps such maps clean.
      Real artefacts lie hundreds of robust standard deviations out.
    * ``max_fraction = 0.1``: artefacts are "a few" tokens (about 2% of them in the paper); a map where most
      patches are "outliers" has no outliers, so never flag more than 10% of the patches.

    Args:
        tokens: ``[L+1, N, D]`` (or ``[B, L+1, N, D]``, flagged per image).
        num_prefix_tokens: p.
        layers: indices into ``tokens``' first dimension (negative count from the end); None: :func:`default_layers`.
        ratio: norm ratio to the median, > 1.
        min_z: robust z-score guard, or None to use the ratio alone.
        max_fraction: the cap, in [0, 1].

    Returns:
        :class:`ArtefactTokens` (mask ``[P]`` or ``[B, P]``).
    """
    t, batched = with_batch_dim(as_float(tokens, "tokens"), 3, "tokens", "L+1, N, D")
    B, T, N, _ = t.shape
    p = int(num_prefix_tokens)
    if not 0 <= p < N:
        raise ValueError(f"num_prefix_tokens={p} must be in [0, {N}) for {N} tokens")
    if not math.isfinite(ratio) or ratio <= 1.0:
        raise ValueError(f"ratio={ratio} must be a finite number > 1")
    if not 0.0 <= max_fraction <= 1.0:
        raise ValueError(f"max_fraction={max_fraction} must be in [0, 1]")
    if layers is None:
        used = default_layers(T - 1)
    else:
        used = tuple(_check_token_layer(l, T) for l in layers)
        if not used:
            raise ValueError("layers must name at least one layer")
    P = N - p
    norms = torch.linalg.vector_norm(t[:, list(used), p:], dim=-1)  # [B, n, P]
    med = norms.median(dim=-1).values  # lower median, exact and deterministic
    outlier = (norms > ratio * med[..., None]) & (med[..., None] > 0)
    if min_z is not None:
        mad = (norms - med[..., None]).abs().median(dim=-1).values
        outlier &= (norms - med[..., None]) > float(min_z) * _MAD_TO_SIGMA * mad[..., None]
    score = (norms / med.clamp_min(torch.finfo(norms.dtype).tiny)[..., None]).amax(dim=1)  # [B, P]
    mask = outlier.any(dim=1)
    cap = math.floor(max_fraction * P + 1e-9)
    for b in range(B):
        if int(mask[b].sum()) > cap:
            # stable sort on -score: equal scores keep the lower index first
            order = torch.sort(torch.where(mask[b], -score[b], torch.inf), stable=True).indices
            mask[b] = False
            mask[b, order[:cap]] = True
    if not batched:
        mask, norms, med, score = mask[0], norms[0], med[0], score[0]
    return ArtefactTokens(mask=mask, layers=used, ratio=float(ratio), norms=norms, median=med, score=score,
                          min_z=None if min_z is None else float(min_z), max_fraction=float(max_fraction))


def _check_token_layer(layer: Any, T: int) -> int:
    if isinstance(layer, bool) or not hasattr(layer, "__index__"):
        raise TypeError(f"layers must hold ints, got {layer!r}")
    layer = operator.index(layer)
    if not -T <= layer < T:
        raise IndexError(f"layer {layer} out of range for tokens of {T} layers (0 = embeddings .. {T - 1})")
    return layer % T


def _patch_mask(mask: Any, B: int, P: int, batched: bool) -> torch.Tensor:
    """``mask`` as bool ``[B, P]``: ``[P]`` / ``[gh, gw]`` (one image or shared by the batch) or ``[B, ...]``."""
    m = torch.as_tensor(mask).detach().to("cpu")
    if m.dtype != torch.bool:
        raise TypeError(f"mask must be boolean, got {m.dtype}")
    if m.numel() == P:
        return m.reshape(1, P).expand(B, P)
    if batched and m.numel() == B * P:
        return m.reshape(B, P)
    raise ValueError(f"mask of shape {tuple(m.shape)} does not cover the {P} patch tokens" + (
        f" of {B} images" if batched else ""))


def exclude_tokens(
    attn: Any, mask: Any, *, num_prefix_tokens: int, grads: Any = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Remove the flagged patches as keys from every layer's attention and renormalise the rows.

    With ``keep_k = 0`` for flagged patch keys ``k`` and 1 for every other key (prefix keys are always kept)::

        attn'[l, h, q, k] = attn[l, h, q, k] keep_k / sum_j attn[l, h, q, j] keep_j     (0 where that sum is 0)
        grads'[l, h, q, k] = grads[l, h, q, k] keep_k

    Every row (flagged tokens' own query rows included) again sums to 1, unless all its mass was on removed keys:
    then it is all 0 (no NaN). The gradient of the removed entries is dropped and the remaining entries keep the
    gradient of the original forward pass (it is not recomputed for the renormalised attention): gradient rollout
    and relevance then weight the renormalised attention by the captured gradients.

    Args:
        attn: ``[L, H, N, N]`` (or ``[B, L, H, N, N]``).
        mask: bool ``[P]`` or ``[gh, gw]`` (for a batch: the same for every image, or ``[B, P]`` / ``[B, gh, gw]``),
            e.g. :attr:`ArtefactTokens.mask`.
        num_prefix_tokens: p.
        grads: same shape as ``attn``, or None.

    Returns:
        ``(attn', grads')``, new tensors of ``attn``'s shape (``grads'`` None without ``grads``), float32 (float64
        for float64 input).
    """
    a, batched = check_attn(as_float(attn, "attn"))
    B, _, _, N, _ = a.shape
    p = int(num_prefix_tokens)
    if not 0 <= p <= N:
        raise ValueError(f"num_prefix_tokens={p} must be in [0, {N}]")
    keep = torch.ones((B, N), dtype=a.dtype)
    keep[:, p:] = (~_patch_mask(mask, B, N - p, batched)).to(a.dtype)
    keep = keep.to(a.device)[:, None, None, None, :]  # [B, 1, 1, 1, N]
    out = a * keep
    s = out.sum(-1, keepdim=True)
    out = torch.where(s > 0, out / torch.where(s > 0, s, torch.ones_like(s)), torch.zeros_like(out))
    g = None
    if grads is not None:
        g = check_grads(a, grads, batched) * keep
    if not batched:
        out = out[0]
        g = None if g is None else g[0]
    return out, g


Query = Literal["cls", "patches"]


def _query_rows(a: torch.Tensor, query: Query | int, p: int) -> torch.Tensor:
    """``a [B, L, H, N, N]`` -> the chosen query rows averaged: ``[B, L, H, N]`` in :func:`compute_dtype` (only the
    rows read are promoted)."""
    dt = compute_dtype(a)
    if query == "cls":
        if p < 1:
            raise ValueError("query='cls' needs a [CLS] token (num_prefix_tokens >= 1)")
        return a[..., 0, :].to(dt)
    if query == "patches":
        return torch.stack([a[:, l, :, p:, :].to(dt).mean(-2) for l in range(a.shape[1])], dim=1)
    if isinstance(query, int) and not isinstance(query, bool) and -a.shape[-1] <= query < a.shape[-1]:
        return a[..., query, :].to(dt)
    raise ValueError(f"query={query!r}; valid: 'cls', 'patches' or a token index")


def register_attention_share(
    attn: Any, *, num_registers: int, num_prefix_tokens: int, query: Query | int = "cls", per_head: bool = False
) -> torch.Tensor:
    """Share of the attention a query row gives to the register tokens, per layer.

    Registers are the last ``R = num_registers`` prefix tokens (timm's layout ``[CLS] [DIST] [REG x R] patches``),
    keys ``p-R .. p-1``: ``share[l, h] = sum_{k=p-R}^{p-1} attn[l, h, q, k]`` (rows sum to 1, so it is a fraction).
    ``query="cls"``: q = 0; ``"patches"``: the mean over the patch queries; an int: that token.

    Args:
        attn: ``[L, H, N, N]`` (or ``[B, L, H, N, N]``).
        num_registers: R, in [0, p] (0 gives zeros).
        num_prefix_tokens: p.
        query: ``"cls" | "patches"`` or a token index.
        per_head: return ``[L, H]`` instead of the mean over heads ``[L]``.

    Returns:
        ``[L]`` or ``[L, H]`` (``[B, ...]`` for a batch), in [0, 1].
    """
    a, batched = check_attn(as_floating(attn, "attn"))
    p, R = int(num_prefix_tokens), int(num_registers)
    if not 0 <= R <= p <= a.shape[-1]:
        raise ValueError(f"need 0 <= num_registers ({R}) <= num_prefix_tokens ({p}) <= {a.shape[-1]} tokens")
    share = _query_rows(a, query, p)[..., p - R:p].sum(-1)  # [B, L, H]
    share = share if per_head else share.mean(-1)
    return share if batched else share[0]


def artefact_attention_share(
    attn: Any, mask: Any, *, num_prefix_tokens: int, query: Query | int = "cls", per_head: bool = False
) -> torch.Tensor:
    """Share of the [CLS] row's attention that goes to the flagged patches, per layer.

    ``share[l] = mean_h sum_{k: mask_k} attn[l, h, q, p + k]`` with q = 0 (``query`` as in
    :func:`register_attention_share`).

    Args:
        attn: ``[L, H, N, N]`` (or ``[B, L, H, N, N]``).
        mask: as in :func:`exclude_tokens`.
        num_prefix_tokens: p.
        query: ``"cls" | "patches"`` or a token index.
        per_head: return ``[L, H]`` instead of the mean over heads.

    Returns:
        ``[L]`` or ``[L, H]`` (``[B, ...]`` for a batch), in [0, 1].
    """
    a, batched = check_attn(as_floating(attn, "attn"))
    B, N, p = a.shape[0], a.shape[-1], int(num_prefix_tokens)
    if not 0 <= p <= N:
        raise ValueError(f"num_prefix_tokens={p} must be in [0, {N}]")
    m = _patch_mask(mask, B, N - p, batched).to(device=a.device, dtype=compute_dtype(a))  # [B, P]
    rows = _query_rows(a, query, p)[..., p:]  # [B, L, H, P]
    share = (rows * m[:, None, None, :]).sum(-1)
    share = share if per_head else share.mean(-1)
    return share if batched else share[0]
