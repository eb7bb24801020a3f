"""top_mass_mask: DINO's "keep the top p% of mass" mask."""

from __future__ import annotations

from itertools import combinations

import numpy as np
import pytest
import torch

from vitviz.analysis import top_mass_mask


def _check_minimal(m, mask, keep):
    w = np.where(np.isfinite(m) & (m > 0), m, 0.0)
    total = w.sum()
    kept = w[mask].sum()
    assert kept >= keep * total * (1 - 1e-12)
    if mask.any():
        smallest = w[mask].min()
        assert kept - smallest < keep * total
        assert smallest >= w[~mask].max(initial=0.0)  # every kept patch outweighs every dropped one


@pytest.mark.parametrize("keep", [0.0, 0.1, 0.6, 0.9, 1.0])
def test_kept_mass_reaches_keep_and_is_minimal(keep):
    rng = np.random.default_rng(0)
    for _ in range(50):
        m = rng.gamma(0.5, size=(7, 9))
        mask = top_mass_mask(m, keep)
        assert mask.shape == (7, 9) and mask.dtype == bool
        _check_minimal(m, mask, keep)
    assert not top_mass_mask(m, 0.0).any()
    assert top_mass_mask(m, 1.0).all()


def test_vs_brute_force_on_tiny_maps():
    rng = np.random.default_rng(1)
    for _ in range(200):
        m = rng.integers(0, 4, size=(2, 3)).astype(float)  # many ties
        keep = float(rng.uniform())
        # brute force: the smallest subsets first, the lexicographically smallest index set among the heaviest
        w = m.ravel()
        best = None
        for size in range(7):
            sets = [c for c in combinations(range(6), size) if w[list(c)].sum() >= keep * w.sum() - 1e-12]
            if sets:
                best = max(sets, key=lambda c: (w[list(c)].sum(), [-i for i in c]))
                break
        ref = np.zeros(6, dtype=bool)
        ref[list(best)] = True
        got = top_mass_mask(m, keep)
        if w.sum() == 0:
            assert not got.any()
        else:
            assert (got.ravel() == ref).all(), (m, keep, got, ref)


def test_ties_are_deterministic_lower_index_first():
    m = np.ones((3, 4))
    mask = top_mass_mask(m, 0.5)  # 6 of 12 equal patches: the first six in row-major order
    assert mask.ravel().tolist() == [True] * 6 + [False] * 6
    assert top_mass_mask(m, 0.6).sum() == 8  # ceil(0.6 * 12)
    m = np.array([[1.0, 3.0], [3.0, 1.0]])
    assert top_mass_mask(m, 0.5).tolist() == [[False, True], [True, False]]
    assert top_mass_mask(m, 0.3).tolist() == [[False, True], [False, False]]


def test_zero_negative_nan_and_inf():
    assert not top_mass_mask(np.zeros((4, 4))).any()  # no mass: nothing kept
    assert not top_mass_mask(-np.ones((2, 2))).any()
    assert not top_mass_mask(np.full((2, 2), np.nan)).any()
    m = np.array([[np.nan, 4.0, -10.0], [np.inf, 1.0, 0.0]])
    assert top_mass_mask(m, 0.6).tolist() == [[False, True, False], [False, False, False]]
    assert top_mass_mask(m, 1.0).tolist() == [[False, True, False], [False, True, False]]
    assert top_mass_mask(np.zeros((0, 3))).shape == (0, 3)


def test_torch_input_gives_a_tensor_equal_to_numpy():
    rng = np.random.default_rng(2)
    m = rng.random((14, 14)) ** 4
    t = torch.from_numpy(m).float()
    got = top_mass_mask(t, 0.6)
    assert isinstance(got, torch.Tensor) and got.dtype == torch.bool and got.device == t.device
    assert (got.numpy() == top_mass_mask(m.astype(np.float32), 0.6)).all()
    assert (top_mass_mask(m.tolist(), 0.6) == top_mass_mask(m, 0.6)).all()


def test_bad_keep():
    for keep in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError):
            top_mass_mask(np.ones((2, 2)), keep)
