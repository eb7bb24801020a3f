"""Fused CPU kernels (numba) for the per-layer passes over attention: entropy, distance sums, head fusion. No Qt.

Why: for ViT-B/16 at 224 px one image's attention is ``12 x 12 x 197 x 197`` = 5.6 M entries (22 MB), and the
analyses touch each entry several times (a log for the entropy, a distance weight, the head fusions, the products with
the gradients). In torch every one of those is a separate pass over memory with its own temporary, and ``log`` alone
costs about 5 ms on two cores. One compiled loop does all of it per entry while the entry is in a register; the
logarithm is a polynomial that the compiler vectorises (8 floats per AVX2 instruction). Results equal the torch
code to float32 round-off (the tests compare both paths with each other and with brute-force loops).

The kernels run for float32 tensors on the CPU; everything else (float64, CUDA, or numba missing or switched off with
``VITVIZ_NUMBA=0``) takes the torch path in the calling modules. They release the GIL, and the layers are split
over ``torch.get_num_threads()`` Python threads. The first call compiles them (a few seconds); the compiled code is
cached on disk by numba (``NUMBA_CACHE_DIR`` sets where), so later runs load it in well under a second.
"""

from __future__ import annotations

import logging
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import torch

FUSION_CODES = {"mean": 0, "max": 1, "min": 2}
log = logging.getLogger(__name__)

_lock = threading.Lock()
_state: dict[str, Any] = {}  # "kernel": the compiled function (or None when unavailable), "pool": executor


def enabled() -> bool:
    """True when the numba kernels can run (numba importable, not switched off by ``VITVIZ_NUMBA=0``)."""
    return _kernel() is not None


def usable(*tensors: torch.Tensor | None) -> bool:
    """True when the kernels apply to these tensors: CPU float32 (None entries are ignored) and numba available."""
    for t in tensors:
        if t is not None and (t.device.type != "cpu" or t.dtype != torch.float32):
            return False
    return enabled()


def _kernel():
    with _lock:
        if "kernel" not in _state:
            _state["kernel"] = None if os.environ.get("VITVIZ_NUMBA", "1") == "0" else _compile()
        return _state["kernel"]


def _kernels_or_raise():
    k = _kernel()
    if k is None:
        raise RuntimeError("the numba kernels are not available (check vitviz.analysis._kernels.usable first)")
    return k


def _pool() -> ThreadPoolExecutor:
    with _lock:
        pool = _state.get("pool")
        if pool is None:
            pool = _state["pool"] = ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1),
                                                       thread_name_prefix="vitviz-kernel")
        return pool


def _compile():
    """Import the numba module and run both kernels once on tiny inputs (the compile, or the load from numba's
    cache, happens here, with the argument types of every later call). None when that fails for any reason."""
    try:
        from vitviz.analysis import _numba_kernels as nk
    except ImportError:  # numba not installed: the torch path does the same work
        return None
    except Exception as e:  # numba installed but broken (e.g. llvmlite): never fatal
        log.warning("vitviz: numba does not load (%s: %s); using the torch code", type(e).__name__, e)
        return None
    try:
        a = np.full((2, 2, 3, 3), 1.0 / 3.0, np.float32)
        ent, mad = np.zeros((2, 2)), np.zeros((2, 2))
        blocks = tuple(np.zeros((2, 3, 3), np.float32) for _ in range(3))  # fused, ag, pos
        nk.sweep(a, a.view(np.int32), a, np.ones((2, 2), np.float32), 1, 0, 0, True, True, True, True, 3,
                 0, 2, ent, mad, *blocks)
        chain_out = np.empty(3, np.float64)
        nk.cls_chain(blocks[0][:1], a[0, 0, 0], True, False, chain_out)
        if not np.allclose(chain_out.sum(), 1.0):
            raise RuntimeError(f"rollout row sums to {chain_out.sum()}, not 1")
    except Exception as e:  # a numba/LLVM problem on this machine: never fatal, the torch path remains
        log.warning("vitviz: the numba kernels do not work here (%s: %s); using the torch code", type(e).__name__, e)
        return None
    return nk.sweep, nk.cls_chain


def warm_up() -> bool:
    """Compile (or load from numba's cache) the kernels now, e.g. on a worker thread at start-up, so that the first
    analysis does not wait for it. Returns :func:`enabled`."""
    return enabled()


_DUMMY = np.zeros((1, 1, 1, 1), np.float32)


def sweep(
    a: torch.Tensor,
    g: torch.Tensor | None = None,
    *,
    num_prefix_tokens: int = 1,
    entropy: bool = False,
    patch_dist: torch.Tensor | None = None,
    fusion: str | None = None,
    start_layer: int = 0,
    last_cls_only: bool = True,
    grad_outputs: tuple[str, ...] = ("ag", "pos"),
) -> dict[str, torch.Tensor]:
    """One image's ``a [L, H, N, N]`` (and ``g``, same shape) -> the requested per-layer results (float32 tensors):

    - ``entropy=True``: ``"entropy_sum" [L, H]``, ``sum_ij a ln max(a, tiny)`` (float64) per layer and head;
    - ``patch_dist [M, M]`` given: ``"distance" [L, H]``, mean over patch queries of
      ``sum_j P_ij dist_ij / sum_j P_ij`` over the patch block ``P`` (0 for a query with no patch mass);
    - ``fusion`` given: ``"fused" [L - start, N, N]``, heads fused (mean/max/min) for layers ``start..L-1``;
    - ``g`` given: ``"ag"`` and ``"pos"`` ``[L - start, N, N]``, ``mean_h(a g)`` and ``mean_h(max(a g, 0))`` (those of
      them named in ``grad_outputs``).

    With ``last_cls_only`` only row 0 of the last layer's fused rows is computed (the others are left undefined).
    Callers check :func:`usable` first.
    """
    kernel = _kernels_or_raise()[0]
    an = a.detach().contiguous().numpy()
    L, H, N, _ = an.shape
    p = int(num_prefix_tokens)
    s = int(start_layer)
    gn = _DUMMY if g is None else g.detach().contiguous().numpy()
    dist = _DUMMY[0, 0] if patch_dist is None else patch_dist.detach().to(torch.float32).contiguous().numpy()
    n_out = L - s if (fusion is not None or g is not None) else 0
    ent = np.empty((L, H), np.float64)
    mad = np.empty((L, H), np.float64)
    fused = np.empty((n_out, N, N), np.float32) if fusion is not None else _DUMMY[0]
    want = {k for k in grad_outputs if g is not None}
    if not want <= {"ag", "pos"}:
        raise ValueError(f"grad_outputs={grad_outputs!r}; valid names: 'ag', 'pos'")
    ag = np.empty((n_out, N, N), np.float32) if "ag" in want else _DUMMY[0]
    pos = np.empty((n_out, N, N), np.float32) if "pos" in want else _DUMMY[0]
    args = (an, an.view(np.int32), gn, dist, p, FUSION_CODES.get(fusion or "mean", 0), s,
            bool(last_cls_only), bool(entropy), patch_dist is not None, fusion is not None,
            ("ag" in want) + 2 * ("pos" in want))
    outs = (ent, mad, fused, ag, pos)
    workers = max(1, min(L, torch.get_num_threads()))
    if workers == 1:
        kernel(*args, 0, L, *outs)
    else:
        cuts = np.linspace(0, L, workers + 1).round().astype(int)
        futures = [_pool().submit(kernel, *args, int(cuts[k]), int(cuts[k + 1]), *outs) for k in range(workers)]
        for f in futures:
            f.result()
    result: dict[str, torch.Tensor] = {}
    if entropy:
        result["entropy_sum"] = torch.from_numpy(ent)
    if patch_dist is not None:
        result["distance"] = torch.from_numpy(mad).float()
    if fusion is not None:
        result["fused"] = torch.from_numpy(fused)
    if "ag" in want:
        result["ag"] = torch.from_numpy(ag)
    if "pos" in want:
        result["pos"] = torch.from_numpy(pos)
    return result


def cls_row(T: torch.Tensor, last: torch.Tensor, *, normalise: bool, clamp0: bool = False) -> torch.Tensor:
    """Row 0 of a product of per-layer matrices, one image, as a row vector times matrices (last layer first).

    ``T [n, N, N]``: the fused attention of layers ``start .. L-2``; ``last [N]``: the [CLS] row of layer ``L-1``.
    ``normalise=True``: attention rollout with discard 0, ``A_hat = (A + I) / rowsum(A + I)`` per layer, product
    ``A_hat_{L-1} ... A_hat_start``; ``False``: relevance, ``(I + A_{L-1}) ... (I + A_start)``. ``clamp0`` uses
    ``max(A, 0)``. Returns ``[N]`` float64.
    """
    chain = _kernels_or_raise()[1]
    out = np.empty(last.shape[-1], np.float64)
    chain(T.detach().contiguous().numpy(), last.detach().contiguous().numpy(), bool(normalise), bool(clamp0), out)
    return torch.from_numpy(out)
