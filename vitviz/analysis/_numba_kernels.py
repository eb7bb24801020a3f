"""The numba-compiled loops behind :mod:`vitviz.analysis._kernels` (imported only when numba is installed).

Module-level functions and constants (not closures) so that numba's on-disk cache finds them again in the next
process. Every loop runs over ``range(n)`` on a slice: with an index LLVM cannot prove non-negative
(``range(lo, hi)``, ``range(p, N)``) numba keeps its negative-index wraparound, which turns the vector loads into
gathers (3x slower). The int32 constants keep the bit arithmetic in 32-bit lanes (int64 lanes do not vectorise on
AVX2).
"""

import math

import numba
import numpy as np

f32 = np.float32
ln2 = f32(math.log(2.0))
ln_tiny = f32(math.log(float(np.finfo(np.float32).tiny)))
tiny = f32(np.finfo(np.float32).tiny)
i23, i255, i127, mant = np.int32(23), np.int32(255), np.int32(127), np.int32(0x7FFFFF)
ulp = f32(2.0 ** -23)
sqrt2 = f32(math.sqrt(2.0))
# Cephes logf: ln(1 + z) = z - z^2/2 + z^3 P(z) for 1 + z in [sqrt(1/2), sqrt(2)), relative error < 1e-7
c0, c1, c2, c3, c4 = f32(7.0376836292e-2), f32(-1.1514610310e-1), f32(1.1676998740e-1), f32(-1.2420140846e-1), \
    f32(1.4249322787e-1)
c5, c6, c7, c8 = f32(-1.6668057665e-1), f32(2.0000714765e-1), f32(-2.4999993993e-1), f32(3.3333331174e-1)
one, half, zero = f32(1.0), f32(0.5), f32(0.0)
chunk = 2048  # float32 partial sums over this many entries, then added in float64

# reassoc lets the sums vectorise; contract allows FMA. No nnan/ninf: NaN and inf propagate as in torch.
_OPTS = dict(nogil=True, error_model="numpy", boundscheck=False, fastmath={"reassoc", "contract", "nsz"})


def _jit(fn):
    """numba.njit with the on-disk cache where there is a writable place for it (beside this file, or the user's
    cache folder); without one (a read-only install and no writable home) numba refuses ``cache=True`` outright, so
    compile without the cache: every process then compiles again (a few seconds) but works."""
    try:
        return numba.njit(cache=True, **_OPTS)(fn)
    except RuntimeError:
        return numba.njit(cache=False, **_OPTS)(fn)


@_jit
def x_ln_x_sum(x, bits):
    """sum of x ln max(x, tiny) over flat float32 x (bits: its int32 view), in float64."""
    total = 0.0
    n = x.size
    for c in range(0, n, chunk):
        xs = x[c:c + chunk]
        bs = bits[c:c + chunk]
        s = zero
        for k in range(xs.size):
            v = xs[k]
            b = bs[k]
            e = f32(((b >> i23) & i255) - i127)
            m = f32(b & mant) * ulp + one  # v = m 2^e, m in [1, 2)
            big = m > sqrt2
            m = half * m if big else m
            e = e + one if big else e
            z = m - one
            z2 = z * z
            y = ((((((((c0 * z + c1) * z + c2) * z + c3) * z + c4) * z + c5) * z + c6) * z + c7) * z + c8) * z * z2
            ln = e * ln2 + (z + (y - half * z2))
            # x < tiny (0, subnormal, negative): x ln(tiny), the clamped form (0 ln 0 = 0)
            s += v * (ln if v >= tiny else ln_tiny)
        total += s
    return total


@_jit
def sweep(a, bits, g, dist, p, fusion, start, last_cls_only, want_ent, want_dist, want_fuse, want_grad,
          l0, l1, ent, mad, fused, ag, pos):
    """Layers l0..l1-1 of one image. a, g: [L, H, N, N] float32 (C order); bits: a's int32 view (same shape);
    dist: [M, M]; outputs: ent, mad [L, H] (float64), fused/ag/pos [L - start, N, N] (row 0 only for the last
    layer when last_cls_only)."""
    L, H, N, _ = a.shape
    M = N - p
    NN = N * N
    inv_h = f32(1.0 / H)
    for l in range(l0, l1):
        if want_ent:
            for h in range(H):
                ent[l, h] = x_ln_x_sum(a[l, h].reshape(NN), bits[l, h].reshape(NN))
        if want_dist:
            for h in range(H):
                acc = 0.0
                for i in range(M):
                    row = a[l, h, p + i, p:]
                    drow = dist[i]
                    num = zero
                    den = zero
                    for j in range(M):
                        v = row[j]
                        num += v * drow[j]
                        den += v
                    if den > zero:  # a query with no patch mass contributes 0 (NaN too, as in torch.where)
                        acc += num / den
                mad[l, h] = acc / M
        if l < start or not (want_fuse or want_grad != 0):
            continue
        # whole [rows, N] blocks as flat vectors (one remainder per block, not per row); the outputs stay in cache.
        # (Adding the heads piece by piece, so that a piece of the output stays in L1, measured 13-28% slower.)
        cnt = (1 if (last_cls_only and l == L - 1) else N) * N
        o = l - start
        if want_fuse:
            fo = fused[o].reshape(NN)[:cnt]
            a0 = a[l, 0].reshape(NN)[:cnt]
            for k in range(cnt):
                fo[k] = a0[k]
            for h in range(1, H):
                ah = a[l, h].reshape(NN)[:cnt]
                if fusion == 0:
                    for k in range(cnt):
                        fo[k] += ah[k]
                elif fusion == 1:  # a NaN wins (and stays), as in torch.amax
                    for k in range(cnt):
                        v = ah[k]
                        fo[k] = v if (v > fo[k] or v != v) else fo[k]
                else:
                    for k in range(cnt):
                        v = ah[k]
                        fo[k] = v if (v < fo[k] or v != v) else fo[k]
            if fusion == 0:
                for k in range(cnt):
                    fo[k] *= inv_h
        if want_grad != 0:  # 1: mean_h(A G) only, 2: mean_h(max(A G, 0)) only, 3: both
            ao = ag[o].reshape(NN)[:cnt] if want_grad != 2 else ag[0].reshape(-1)[:0]
            po = pos[o].reshape(NN)[:cnt] if want_grad != 1 else pos[0].reshape(-1)[:0]
            for k in range(ao.size):
                ao[k] = zero
            for k in range(po.size):
                po[k] = zero
            for h in range(H):
                ah = a[l, h].reshape(NN)[:cnt]
                gh = g[l, h].reshape(NN)[:cnt]
                if want_grad == 3:
                    for k in range(cnt):
                        v = ah[k] * gh[k]
                        ao[k] += v
                        po[k] += zero if v < zero else v  # max(v, 0), NaN kept
                elif want_grad == 1:
                    for k in range(cnt):
                        ao[k] += ah[k] * gh[k]
                else:
                    for k in range(cnt):
                        v = ah[k] * gh[k]
                        po[k] += zero if v < zero else v
            for k in range(ao.size):
                ao[k] *= inv_h
            for k in range(po.size):
                po[k] *= inv_h


@_jit
def cls_chain(T, last, normalise, clamp0, out):
    """Row 0 of the product of the transitions of T[n-1] ... T[0] after the last layer's [CLS] row ``last``:
    normalise: rollout, each layer's ``(A + I)`` row-normalised (discard 0); else relevance, ``(I + A)``.
    clamp0: use max(A, 0). The products are row vector x matrix in float64; ``out [N]`` float64."""
    n = T.shape[0]
    N = last.size
    v = out
    acc = np.empty(N, np.float64)
    rs = 1.0
    for j in range(N):
        x = last[j]
        x = zero if (clamp0 and x < zero) else x
        v[j] = x
        rs += x
    if normalise:
        for j in range(N):
            v[j] /= rs
        v[0] += 1.0 / rs
    else:
        v[0] += 1.0
    for q in range(n):
        Tl = T[n - 1 - q]
        for j in range(N):
            acc[j] = v[j] if not normalise else 0.0
        for i in range(N):
            row = Tl[i]
            w = v[i]
            if normalise:
                r = 1.0
                if clamp0:
                    for j in range(N):
                        x = row[j]
                        r += zero if x < zero else x
                else:
                    for j in range(N):
                        r += row[j]
                w = w / r
                acc[i] += w
            if clamp0:
                for j in range(N):
                    x = row[j]
                    acc[j] += w * (zero if x < zero else x)
            else:
                for j in range(N):
                    acc[j] += w * row[j]
        for j in range(N):
            v[j] = acc[j]

