"""How much memory a streamed pass (:mod:`vitviz.capture.streaming.passes`) takes, how many images fit in what is
available, and whether an error means "out of memory".

The estimate counts, per image, what lives at the peak beyond the weights (which are resident already): one block's
attention scores and probabilities ``[H, N, N]`` in the model's dtype, the observers' float32 copy of them and their
scratch, the block's other activations (``[N, D]`` and the MLP's ``[N, hidden]``); with gradients the L block inputs
kept for the recomputation, one block's graph and its gradients. It is deliberately on the high side (measured peaks:
``bench/memory.py``); the batch is chosen to fill :data:`FILL` of the memory available (Linux ``MemAvailable`` on the
CPU, ``torch.cuda.mem_get_info`` on a GPU: :func:`vitviz.capture.available_memory`).

No Qt.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from vitviz.capture.preflight import available_memory

__all__ = ["FILL", "fit_batch", "graph_fits", "is_out_of_memory", "pass_bytes"]

FILL = 0.7
"""The share of the available memory a batch may take (the rest: the allocator's slack, the writer's figures ...)."""

KEEP_GRAPH_SHARE = 0.5
"""Every block's graph is kept from the forward (no recomputation) when it takes at most this share of the memory
available."""


def _shapes(model: Any, grid: tuple[int, int]) -> tuple[int, int, int, int, int, int]:
    """``(L, H, N, D, hidden, itemsize)`` of a vitviz ViT at ``grid``."""
    cfg = model.config
    L, H, D = int(cfg.depth), int(cfg.num_heads), int(cfg.embed_dim)
    N = int(model.num_prefix_tokens) + int(grid[0]) * int(grid[1])
    hidden = int(D * cfg.mlp_ratio)
    p = next((t for t in model.parameters() if t.is_floating_point()), None)
    item = p.element_size() if p is not None else 4
    return L, H, N, D, hidden, item


def pass_bytes(model: Any, grid: tuple[int, int], batch: int, *, gradients: bool, keep_graph: bool = False,
               extra_per_image: int = 0) -> int:
    """Bytes a streamed pass of ``batch`` images at ``grid`` takes beyond the weights (an upper estimate).

    Args:
        gradients: with a backward.
        keep_graph: every block's graph kept from the forward (else one block's, recomputed at its step).
        extra_per_image: what the observers keep per image (e.g. the rollout transitions of a forward-only pass).
    """
    L, H, N, D, hidden, item = _shapes(model, grid)
    attn, tok, mlp = H * N * N, N * D, N * hidden
    forward = attn * (2 * item + 2 * 4) + (6 * tok + 2 * mlp) * item
    if not gradients:
        per = forward
    else:
        graph = attn * 2 * item + (10 * tok + 3 * mlp) * item  # saved for the backward of one block
        backward = attn * (3 * item + 3 * 4) + (6 * tok + 2 * mlp) * item  # its gradients, the observers' products
        per = max(forward, (L * graph if keep_graph else L * tok * item + graph) + backward)
    return int(batch) * (per + int(extra_per_image))


def graph_fits(model: Any, grid: tuple[int, int], batch: int, *, device: torch.device | str = "cpu",
               available: int | None = None) -> bool:
    """Whether keeping every block's graph (no recomputation) takes at most :data:`KEEP_GRAPH_SHARE` of the memory
    available (False when that is unknown)."""
    free = available_memory(device) if available is None else available
    if free is None:
        return False
    return pass_bytes(model, grid, batch, gradients=True, keep_graph=True) <= KEEP_GRAPH_SHARE * free


def fit_batch(model: Any, grid: tuple[int, int], requested: int, *, gradients: bool,
              device: torch.device | str = "cpu", extra_per_image: int = 0,
              available: int | None = None) -> tuple[int, int, int | None]:
    """The largest batch up to ``requested`` whose pass fits in :data:`FILL` of the memory available (at least 1).

    Returns:
        ``(batch, bytes per image, bytes available or None when unknown)``.
    """
    per = pass_bytes(model, grid, 1, gradients=gradients, extra_per_image=extra_per_image)
    free = available_memory(device) if available is None else available
    if free is None or per <= 0:
        return max(1, int(requested)), per, free
    return max(1, min(int(requested), math.floor(FILL * free / per))), per, free


def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` says an allocation failed (a GPU's out-of-memory error, the CPU allocator's, MemoryError, and
    oneDNN's "could not create a primitive", which is how a CPU convolution or matmul reports that its workspace
    could not be allocated under a memory limit)."""
    if isinstance(error, MemoryError):
        return True
    oom = getattr(torch, "OutOfMemoryError", None) or getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None)
    if oom is not None and isinstance(error, oom):
        return True
    if isinstance(error, RuntimeError):
        text = str(error).lower()
        return any(s in text for s in ("out of memory", "can't allocate memory", "cannot allocate memory",
                                       "could not create a primitive"))
    return False
