"""The numba kernels behind vitviz.analysis (CPU float32) against the torch code and exact references.

Every public analysis function has two implementations for float32 CPU input: the compiled kernels
(:mod:`vitviz.analysis._kernels`) and the torch code, which float64, CUDA and machines without numba use. These
tests check that the kernels are really used, that both give the same results (and both match the brute-force loops
of test_analysis.py), and the corner cases of the kernels' own arithmetic: the polynomial logarithm, 0 log 0, NaN,
and the split of the layers over threads.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from vitviz import analysis as A
from vitviz.analysis import _kernels
from vitviz.analysis import distance as distance_mod

GH, GW = 3, 2


def _attn(p=1, L=3, H=2, gh=GH, gw=GW, B=None, seed=0, scale=2.0):
    g = torch.Generator().manual_seed(seed)
    N = p + gh * gw
    shape = (L, H, N, N) if B is None else (B, L, H, N, N)
    return (torch.randn(shape, generator=g) * scale).softmax(-1)


def _grads(like, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(like.shape, generator=g)


@pytest.fixture
def torch_path(monkeypatch):
    """Within the test, the kernels count as unavailable: every function takes its torch code."""
    _kernels.enabled()  # loaded first, so that the patch below is what later calls see
    monkeypatch.setitem(_kernels._state, "kernel", None)


def _all(a, g, *, grid=(GH, GW), p=1, fusion="mean", ratio=0.0, clamp="after_mean", start=0):
    kw = dict(grid=grid, num_prefix_tokens=p)
    out = {
        "rollout": A.attention_rollout(a, head_fusion=fusion, discard_ratio=ratio, start_layer=start, **kw),
        "gradient_rollout": A.gradient_rollout(a, g, discard_ratio=ratio, clamp=clamp, start_layer=start, **kw),
        "relevance": A.relevance(a, g, start_layer=start, **kw),
        "distance": A.mean_attention_distance(a, patch_size=16, **kw),
        "entropy": A.attention_entropy(a),
    }
    if a.ndim == 4:
        s = A.analyse_image(a, g, patch_size=16, head_fusion=fusion, discard_ratio=ratio, clamp=clamp,
                            start_layer=start, **kw)
        out.update({"sweep rollout": s.rollout, "sweep gradient_rollout": s.gradient_rollout,
                    "sweep relevance": s.relevance, "sweep distance": s.mean_attention_distance,
                    "sweep entropy": s.attention_entropy})
    return out


def test_kernels_are_available_and_used_for_float32_cpu(monkeypatch):
    """numba is a dependency: the kernels must load here. With them, the torch loop bodies are never called."""
    assert _kernels.enabled(), "the numba kernels failed to load (see the log): analyses would run on torch only"
    a = _attn(L=2, H=2)
    assert _kernels.usable(a) and not _kernels.usable(a.double()) and not _kernels.usable(a, a.half())

    def boom(*args, **kwargs):
        raise AssertionError("torch path taken for float32 CPU input")

    for name in ("entropy_sum_", "distance_sums_"):
        monkeypatch.setattr(distance_mod, name, boom)
    import vitviz.analysis.rollout as rollout_mod
    import vitviz.analysis.sweep as sweep_mod
    monkeypatch.setattr(rollout_mod, "_fused", boom)
    monkeypatch.setattr(rollout_mod, "_grad_weighted", boom)
    monkeypatch.setattr(rollout_mod, "_cls_row_of_product", boom)
    monkeypatch.setattr(sweep_mod, "_torch_layers", boom)
    monkeypatch.setattr(sweep_mod, "_fused", boom)
    out = _all(a, _grads(a))
    assert all(torch.isfinite(v).all() for v in out.values())
    # float64 takes the torch code
    with pytest.raises(AssertionError, match="torch path"):
        A.attention_entropy(a.double())


@pytest.mark.parametrize("fusion", ["mean", "max", "min"])
@pytest.mark.parametrize("ratio", [0.0, 0.5])
@pytest.mark.parametrize("clamp", ["after_mean", "before_mean"])
@pytest.mark.parametrize("p,start", [(1, 0), (2, 1), (5, 3)])
def test_kernels_equal_the_torch_code(fusion, ratio, clamp, p, start, monkeypatch):
    a = _attn(p=p, L=4, H=3, seed=start + 3)
    a[1, 2, 0, p:p + 2] = 0.0  # exact zeros (0 log 0)
    a[1, 2, 0] /= a[1, 2, 0].sum()
    g = _grads(a, seed=5)
    kw = dict(p=p, fusion=fusion, ratio=ratio, clamp=clamp, start=start)
    fast = _all(a, g, **kw)
    _kernels.enabled()
    monkeypatch.setitem(_kernels._state, "kernel", None)
    slow = _all(a, g, **kw)
    for name, want in slow.items():
        have = fast[name]
        assert have.dtype == want.dtype == torch.float32 and have.shape == want.shape, name
        torch.testing.assert_close(have, want, rtol=1e-5, atol=1e-7, msg=name)


def test_kernels_batch_equals_per_image_and_vit_b_size_matches_float64():
    a = _attn(L=3, H=2, B=3, seed=8)
    g = _grads(a, seed=9)
    batch = _all(a, g)
    for b in range(3):
        one = _all(a[b], g[b])
        for name, v in batch.items():
            torch.testing.assert_close(v[b], one[name], rtol=0, atol=0, msg=name)  # same code, same bits
    # ViT-B/16 shapes against the torch code in float64
    a = _attn(p=1, L=12, H=12, gh=14, gw=14, seed=3, scale=4.0)
    a[4, 7, 9, :60] = 0.0
    a[4, 7, 9] /= a[4, 7, 9].sum()
    g = _grads(a, seed=4) * 1e-3
    f32 = _all(a, g, grid=(14, 14))
    f64 = _all(a.double(), g.double(), grid=(14, 14))
    for name, want in f64.items():
        have = f32[name]
        assert have.dtype == torch.float32
        torch.testing.assert_close(have.double(), want, rtol=2e-5, atol=1e-9, msg=name)


def test_x_ln_x_polynomial_is_float32_accurate_over_the_whole_range():
    """Each head holds one value v (the rest 0): the kernel's entropy sum of that head is v ln v."""
    rng = np.random.default_rng(0)
    vals = np.concatenate([
        2.0 ** np.arange(-126, 1),  # exact powers of two
        np.logspace(-37.9, 0, 3000),
        rng.random(3000),
        np.sqrt(0.5) * (1 + np.array([-1e-7, 0, 1e-7])), np.sqrt(2.0) / 2 ** np.arange(1, 20),  # range reduction edge
        1 - np.logspace(-7, -1, 50),  # ln v close to 0
        [1.0, 0.5, 0.25, 1e-30, np.finfo(np.float32).tiny],
    ]).astype(np.float32)
    vals = np.unique(vals)
    a = torch.zeros((1, len(vals), 2, 2))
    a[0, :, 0, 0] = torch.from_numpy(vals)
    got = _kernels.sweep(a, entropy=True)["entropy_sum"][0].numpy()
    v64 = vals.astype(np.float64)
    exact = v64 * np.log(v64)
    err = np.abs(got - exact) / np.abs(exact).clip(min=1e-300)
    err[vals == 1.0] = np.abs(got[vals == 1.0])  # exact 0
    assert err.max() < 3e-7, (vals[err.argmax()], got[err.argmax()], exact[err.argmax()])
    # the clamped form below tiny: 0 ln 0 = 0, x ln(tiny) for subnormal and negative x (as the torch code)
    tiny = np.finfo(np.float32).tiny
    odd = torch.tensor([0.0, -0.0, 1e-40, -0.25, float("inf")])
    b = torch.zeros((1, len(odd), 2, 2))
    b[0, :, 0, 0] = odd
    got = _kernels.sweep(b, entropy=True)["entropy_sum"][0].numpy()
    assert got[0] == 0.0 and got[1] == 0.0
    np.testing.assert_allclose(got[2:4], odd[2:4].double().numpy() * math.log(tiny), rtol=1e-6)
    assert got[4] == np.inf


def test_nan_propagates_like_the_torch_code(torch_path):
    """A NaN in the attention: the same NaNs (and the same finite numbers elsewhere) on both paths."""
    a = _attn(L=3, H=2, seed=12)
    a[1, 0, 2, 3] = float("nan")
    g = _grads(a)
    slow = {f: _all(a, g, fusion=f) for f in ("mean", "max", "min")}
    _kernels._state.pop("kernel")  # load the kernels again for this test only (the fixture restores None after)
    assert _kernels.enabled()
    fast = {f: _all(a, g, fusion=f) for f in ("mean", "max", "min")}
    for f in slow:
        for name, want in slow[f].items():
            torch.testing.assert_close(fast[f][name], want, rtol=1e-5, atol=1e-7, equal_nan=True, msg=f"{f} {name}")
    assert fast["max"]["rollout"].isnan().all() and fast["max"]["entropy"][1, 0].isnan()
    assert not fast["max"]["entropy"][0].isnan().any()


def test_the_split_over_threads_does_not_change_a_bit():
    a = _attn(L=5, H=3, seed=21)
    g = _grads(a)
    before = torch.get_num_threads()
    try:
        results = []
        for n in (1, 2, 3, 7):
            torch.set_num_threads(n)
            results.append(_all(a, g, fusion="max"))
    finally:
        torch.set_num_threads(before)
    for other in results[1:]:
        for name, v in results[0].items():
            assert torch.equal(v, other[name]), name


def test_a_kernel_that_fails_its_smoke_test_falls_back_to_torch(monkeypatch, caplog):
    from vitviz.analysis import _numba_kernels as nk

    def broken(*args):
        raise RuntimeError("LLVM says no")

    monkeypatch.setattr(nk, "sweep", broken)
    with caplog.at_level("WARNING", logger="vitviz.analysis._kernels"):
        assert _kernels._compile() is None
    assert "LLVM says no" in caplog.text and "torch" in caplog.text


@pytest.mark.parametrize("how", ["env", "no-numba"])
def test_without_numba_the_torch_code_gives_the_same_results(how, tmp_path):
    """In a fresh process: VITVIZ_NUMBA=0, or numba not importable at all."""
    a = _attn(L=3, H=2, seed=30)
    g = _grads(a)
    torch.save({"a": a, "g": g}, tmp_path / "in.pt")
    code = (
        "import sys, torch\n"
        + ("sys.modules['numba'] = None\n" if how == "no-numba" else "")
        + "from vitviz.analysis import _kernels\n"
        "from vitviz import analysis as A\n"
        f"d = torch.load({str(tmp_path / 'in.pt')!r}, weights_only=True)\n"
        "s = A.analyse_image(d['a'], d['g'], grid=(3, 2), patch_size=16)\n"
        f"torch.save({{'enabled': _kernels.enabled(), 'rollout': s.rollout, 'entropy': s.attention_entropy,"
        f" 'relevance': s.relevance}}, {str(tmp_path / 'out.pt')!r})\n"
    )
    env = dict(os.environ, VITVIZ_NUMBA="0" if how == "env" else "1")
    subprocess.run([sys.executable, "-c", code], check=True, env=env, timeout=300)
    out = torch.load(tmp_path / "out.pt", weights_only=True)
    assert out["enabled"] is False
    here = A.analyse_image(a, g, grid=(3, 2), patch_size=16)
    torch.testing.assert_close(out["rollout"], here.rollout, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(out["entropy"], here.attention_entropy, rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(out["relevance"], here.relevance, rtol=1e-5, atol=1e-7)


def test_kernels_work_where_numba_has_nowhere_to_write_its_cache(tmp_path):
    """A read-only install and no writable home: numba refuses ``cache=True`` there; the kernels compile without
    the cache instead of failing (here the package copy's ``__pycache__`` is a file, so nothing can be written)."""
    import shutil

    import vitviz

    pkg = tmp_path / "site"
    shutil.copytree(os.path.dirname(vitviz.__file__), pkg / "vitviz",
                    ignore=shutil.ignore_patterns("__pycache__", "*.safetensors", "*.png"))
    (pkg / "vitviz" / "analysis" / "__pycache__").write_text("not a folder")
    blocked = tmp_path / "home-is-a-file"
    blocked.write_text("")
    code = (
        "import torch, vitviz\n"
        f"assert vitviz.__file__.startswith({str(pkg)!r}), vitviz.__file__\n"
        "from vitviz.analysis import _kernels\n"
        "from vitviz import analysis as A\n"
        "a = torch.softmax(torch.randn(2, 2, 5, 5), -1)\n"
        "assert _kernels.enabled()\n"
        "_kernels._state['kernel'], k = None, _kernels._state['kernel']\n"
        "slow = A.attention_entropy(a)\n"
        "_kernels._state['kernel'] = k\n"
        "torch.testing.assert_close(A.attention_entropy(a), slow, rtol=1e-5, atol=1e-7)\n"
        "print('ok')\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    env.update(PYTHONPATH=str(pkg), HOME=str(blocked), XDG_CACHE_HOME=str(blocked / "cache"))
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr[-3000:]
    assert not any((pkg / "vitviz" / "analysis").glob("*.nbi"))


def test_a_broken_numba_install_is_reported_and_the_torch_code_used(monkeypatch, caplog):
    class Broken:
        def __getattr__(self, name):
            raise RuntimeError("llvmlite: symbol not found")

    monkeypatch.setitem(sys.modules, "numba", Broken())
    monkeypatch.delitem(sys.modules, "vitviz.analysis._numba_kernels", raising=False)
    monkeypatch.delattr(sys.modules["vitviz.analysis"], "_numba_kernels", raising=False)  # import it again
    with caplog.at_level("WARNING", logger="vitviz.analysis._kernels"):
        assert _kernels._compile() is None
    assert "llvmlite: symbol not found" in caplog.text


def test_sweep_computes_only_the_requested_gradient_means():
    a = _attn(L=4, H=3, seed=40)
    g = _grads(a)
    both = _kernels.sweep(a, g, start_layer=1)
    ag = _kernels.sweep(a, g, start_layer=1, grad_outputs=("ag",))
    pos = _kernels.sweep(a, g, start_layer=1, grad_outputs=("pos",))
    assert set(ag) == {"ag"} and set(pos) == {"pos"} and set(both) == {"ag", "pos"}
    assert both["ag"].shape == (3,) + a.shape[-2:]
    close = dict(rtol=1e-6, atol=1e-8)  # a fused multiply-add in the one-output loops rounds once less
    torch.testing.assert_close(ag["ag"][:-1], both["ag"][:-1], **close)
    torch.testing.assert_close(ag["ag"][-1, 0], both["ag"][-1, 0], **close)
    torch.testing.assert_close(pos["pos"][:-1], both["pos"][:-1], **close)
    torch.testing.assert_close(pos["pos"][-1, 0], both["pos"][-1, 0], **close)
    prod = (a * g)[1:]
    torch.testing.assert_close(both["ag"][:-1], prod.mean(1)[:-1], rtol=1e-5, atol=1e-7)
    torch.testing.assert_close(both["pos"][-1, 0], prod.clamp(min=0).mean(1)[-1, 0], rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match="grad_outputs"):
        _kernels.sweep(a, g, grad_outputs=("relevance",))
