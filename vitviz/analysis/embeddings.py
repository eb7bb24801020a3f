"""What the embeddings learned: position-embedding similarity, token similarity, patch-embedding filters
(Dosovitskiy et al. 2020, Fig. 7 left and centre). No Qt."""

from __future__ import annotations

from typing import Any

import torch

from vitviz.analysis.basics import as_float, check_layer, resolve_grid, with_batch_dim

__all__ = ["embedding_filters", "position_embedding_similarity", "rope_kernel", "rope_kernel_row", "token_similarity"]

_EPS = 1e-12


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / x.norm(dim=-1, keepdim=True).clamp_min(_EPS)


def position_embedding_similarity(
    pos_embed: Any, *, grid: tuple[int, int], num_prefix_tokens: int = 1
) -> torch.Tensor:
    """Cosine similarity of every patch's position embedding with every other (ViT paper, Fig. 7 centre).

    ``S[i, j, k, l] = <e_ij, e_kl> / (|e_ij| |e_kl|)`` with ``e_ij`` the position embedding of patch (row i, col j).

    Args:
        pos_embed: ``[1, n, D]`` or ``[n, D]``, where ``n = p + gh*gw`` (prefix slots first) or ``n = gh*gw``
            (models whose position embedding has no prefix slots, e.g. timm ``no_embed_class``). For an input size
            other than the nominal one pass ``model.pos_embed_for(grid)``.
        grid: ``(gh, gw)``.
        num_prefix_tokens: p.

    Returns:
        ``[gh, gw, gh, gw]`` float32 (float64 for float64 input).
    """
    pe = as_float(pos_embed, "pos_embed")
    if pe.ndim == 3 and pe.shape[0] == 1:
        pe = pe[0]
    if pe.ndim != 2:
        raise ValueError(f"pos_embed must be [1, n, D] or [n, D], got shape {tuple(pe.shape)}")
    gh, gw = int(grid[0]), int(grid[1])
    n = pe.shape[0]
    if n == gh * gw:
        patches = pe
    elif n == num_prefix_tokens + gh * gw:
        patches = pe[num_prefix_tokens:]
    else:
        raise ValueError(
            f"pos_embed has {n} positions, but grid ({gh}, {gw}) needs {gh * gw} (no prefix slots) or "
            f"{num_prefix_tokens + gh * gw} (with {num_prefix_tokens} prefix slots); for another input size use "
            "model.pos_embed_for(grid)"
        )
    u = _unit(patches)
    return (u @ u.T).reshape(gh, gw, gh, gw)


def rope_kernel(angles: Any, *, grid: tuple[int, int]) -> torch.Tensor:
    """The RoPE kernel of every patch with every other: the similarity the rotation alone gives two positions.

    A rotary embedding turns channel pair ``f`` of a query or key at patch ``i`` by ``theta_i[f]``; a query ``u``
    at ``i`` and the same vector as a key at ``j`` then score ``sum_f |u_f|^2 cos(theta_i[f] - theta_j[f])``.
    For a vector with equal energy in every pair (the average over directions) that is
    ``K[i, j] = mean_f cos(theta_i[f] - theta_j[f])``: 1 at ``i = j``, in ``[-1, 1]``; the cosine similarity of
    ``R_i u`` and ``R_j u`` averaged over ``u``. Learned per-head / per-layer frequencies (mixed RoPE): averaged
    over every leading axis too.

    Args:
        angles: ``[..., gh*gw, F]`` rotation angles of the patches (:func:`vitviz.model.rope.rope_angles`).
        grid: ``(gh, gw)``.

    Returns:
        ``[gh, gw, gh, gw]`` float32.
    """
    a = as_float(angles, "angles")
    gh, gw = int(grid[0]), int(grid[1])
    if a.ndim < 2 or a.shape[-2] != gh * gw:
        raise ValueError(f"angles must be [..., {gh * gw}, F] for grid ({gh}, {gw}), got {tuple(a.shape)}")
    n = a.shape[-2]
    a = a.reshape(-1, n, a.shape[-1]).transpose(0, 1).reshape(n, -1)  # [N, (leading) * F]
    c, s = a.cos(), a.sin()
    return ((c @ c.T + s @ s.T) / a.shape[-1]).reshape(gh, gw, gh, gw)


def rope_kernel_row(angles: Any, *, query: int, grid: tuple[int, int]) -> torch.Tensor:
    """:func:`rope_kernel`'s row of patch ``query`` for every leading index (a head, a layer's head):
    ``[..., gh, gw]`` with ``K[..., j] = mean_f cos(theta[..., query, f] - theta[..., j, f])``."""
    a = as_float(angles, "angles")
    gh, gw = int(grid[0]), int(grid[1])
    if a.ndim < 2 or a.shape[-2] != gh * gw:
        raise ValueError(f"angles must be [..., {gh * gw}, F] for grid ({gh}, {gw}), got {tuple(a.shape)}")
    if not 0 <= int(query) < gh * gw:
        raise IndexError(f"query={query} out of range for {gh * gw} patches")
    d = a[..., int(query), None, :] - a
    return d.cos().mean(-1).reshape(*a.shape[:-2], gh, gw)


def token_similarity(
    tokens: Any, *, layer: int, index: int, grid: tuple[int, int] | None = None, num_prefix_tokens: int = 1
) -> torch.Tensor:
    """Cosine similarity of token ``index`` with every patch token at depth ``layer``.

    ``S[i, j] = cos(t[layer, index], t[layer, p + i*gw + j])``.

    Args:
        tokens: ``[L+1, N, D]`` (or ``[B, L+1, N, D]``); index 0 = embeddings, l = output of block l.
        layer: depth in ``[0, L]`` (negative counts from the end).
        index: token index, prefix tokens included (0 = CLS).
        grid: ``(gh, gw)``; None infers a square grid.
        num_prefix_tokens: p.

    Returns:
        ``[gh, gw]`` (or ``[B, gh, gw]``) float32 (float64 for float64 input).
    """
    t, batched = with_batch_dim(as_float(tokens, "tokens"), 3, "tokens", "L+1, N, D")
    B, L1, N, D = t.shape
    gh, gw = resolve_grid(N, grid, num_prefix_tokens)
    layer = check_layer(layer, L1)
    index = check_layer(index, N, "index")
    x = t[:, layer]  # [B, N, D]
    q = _unit(x[:, index])  # [B, D]
    k = _unit(x[:, num_prefix_tokens:])  # [B, M, D]
    out = torch.bmm(k, q[:, :, None])[..., 0].reshape(B, gh, gw)
    return out if batched else out[0]


def _centred_filters(patch_embed_weight: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``W [D, C, P, P]`` (checked) and ``X [D, C*P*P]``: one row per filter, float64, centred over the D filters."""
    w = as_float(patch_embed_weight, "patch_embed_weight")
    if w.ndim != 4 or w.shape[-1] != w.shape[-2]:
        raise ValueError(f"patch_embed_weight must be [D, C, P, P], got shape {tuple(w.shape)}")
    X = w.reshape(w.shape[0], -1).double()
    return w, X - X.mean(0, keepdim=True)


def embedding_filters(patch_embed_weight: Any, k: int = 28) -> torch.Tensor:
    """The first ``k`` principal components of the patch-embedding filters (ViT paper, Fig. 7 left).

    ``W [D, C, P, P]`` is flattened to ``X [D, C*P*P]`` (one row per filter), centred over the D filters,
    ``X = U S V^T``; component ``c`` is row ``c`` of ``V^T`` (descending variance), its sign fixed so that its
    largest-magnitude entry is positive, reshaped to ``[P, P, C]`` and min-max scaled to [0, 1] for display
    (a constant component becomes 0). Depends on the weights only: compute once per model (an eigendecomposition
    of a ``C*P*P`` square matrix in float64: about 0.2 s for ViT-B/16 on one CPU core).

    Args:
        patch_embed_weight: ``model.patch_embed.proj.weight`` ``[D, C, P, P]``.
        k: number of components, ``1 <= k <= min(D, C*P*P)``.

    Returns:
        ``[k, P, P, C]`` float32 in [0, 1].
    """
    w, X = _centred_filters(patch_embed_weight)
    D, C, P, _ = w.shape
    kmax = min(D, C * P * P)
    if not 1 <= int(k) <= kmax:
        raise ValueError(f"k={k} principal components requested; valid: 1..{kmax} for weights {tuple(w.shape)}")
    k = int(k)
    # right singular vectors = eigenvectors of the (C*P*P)^2 scatter matrix, largest first
    evals, evecs = torch.linalg.eigh(X.T @ X)
    comps = evecs[:, -k:].flip(-1).T  # [k, C*P*P]
    peak = comps.abs().argmax(-1, keepdim=True)
    comps = comps * torch.sign(comps.gather(-1, peak))
    comps = comps.reshape(k, C, P, P).permute(0, 2, 3, 1)
    lo = comps.reshape(k, -1).amin(-1)[:, None, None, None]
    hi = comps.reshape(k, -1).amax(-1)[:, None, None, None]
    span = hi - lo
    out = torch.where(span > 0, (comps - lo) / span.clamp_min(1e-300), torch.zeros_like(comps))
    return out.float()


def embedding_filter_variance(patch_embed_weight: Any) -> torch.Tensor:
    """Share of the filters' variance along each principal component of :func:`embedding_filters`, largest first.

    With ``X [D, C*P*P]`` the centred filters as there and ``s`` its singular values, ``ratio_c = s_c^2 / sum(s^2)``
    (all zeros when every filter is the same).

    Returns:
        ``[min(D, C*P*P)]`` float64, summing to 1.
    """
    _w, X = _centred_filters(patch_embed_weight)
    var = torch.linalg.svdvals(X) ** 2
    total = var.sum()
    return var / total if total > 0 else torch.zeros_like(var)
