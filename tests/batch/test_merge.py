"""Joining the parts of a sharded run (vitviz.batch.parts, vitviz.batch.merge, vitviz.batch.fixed_point): exact sums
whatever the grouping, stats shards that add up to one run bit for bit, the coverage check (a shard missing, images
not done, done twice, two splits, other inputs), and an export's shards merged into the manifest of one run, also
after a shard was interrupted and resumed. The commands under torchrun / SLURM variables:
tests/cli/test_merge_command.py; bad parts: tests/corpus/test_merge_corpus.py."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

from vitviz.batch.export import export_images
from vitviz.batch.export_options import ExportOptions
from vitviz.batch.fixed_point import FixedSum, mean_and_sd
from vitviz.batch.inputs import InputImage, expand_inputs, shard_of
from vitviz.batch.manifest import read_manifest
from vitviz.batch.merge import prepare_export, prepare_stats
from vitviz.batch.parts import ShardPlan, ShardResult, check_coverage, plan_shard
from vitviz.batch.stats import StatsAccumulator
from vitviz.batch.stats_files import StatsPart, part_path, read_part, write_part
from vitviz.pipeline import Pipeline


# ----------------------------------------------------------------------------------------------- exact sums
def test_fixed_sum_does_not_depend_on_the_grouping():
    rng = np.random.default_rng(0)
    v = rng.uniform(-50, 700, (300, 3, 4)) * 10.0 ** rng.integers(-12, 3, (300, 3, 4))
    one = FixedSum((3, 4))
    for x in v:
        one.add(x)
    for seed in range(3):  # three random splits into 5 shards, added in a random order
        owner = np.random.default_rng(seed).integers(0, 5, 300)
        parts = [FixedSum((3, 4)) for _ in range(5)]
        for x, o in zip(v, owner):
            parts[o].add(x)
        total = FixedSum((3, 4))
        for i in np.random.default_rng(seed + 10).permutation(5):
            total.add_sum(parts[i])
        assert np.array_equal(total.hi, one.hi) and np.array_equal(total.lo, one.lo)
    # the exact sum of the values on the 2^-52 grid: within 300 half-steps of the true sum
    for cell, got in enumerate(one.total()):
        exact = sum(Fraction(float(x)) for x in v.reshape(300, -1)[:, cell])
        assert abs(got - exact) <= Fraction(300, 2 ** 53)
    # plain float sums do depend on the grouping (the reason for all this)
    a = v.sum(0)
    b = v[::2].sum(0) + v[1::2].sum(0)
    assert not np.array_equal(a, b)


def test_mean_and_sd_against_numpy_and_non_finite_cells():
    rng = np.random.default_rng(1)
    v = rng.uniform(0, 100, (9, 2, 3))
    v[4, 1, 2] = np.nan
    s, q = FixedSum((2, 3)), FixedSum((2, 3))
    for x in v:
        s.add(x)
        q.add(x * x)
    mean, sd = mean_and_sd(s, q, 9)
    ok = np.isfinite(v).all(0)
    np.testing.assert_allclose(mean[ok], v.mean(0)[ok], rtol=1e-14)
    np.testing.assert_allclose(sd[ok], v.std(0, ddof=1)[ok], rtol=1e-10)
    assert np.isnan(mean[1, 2]) and np.isnan(sd[1, 2]) and np.isfinite(mean[ok]).all()
    one_mean, one_sd = mean_and_sd(s, q, 1)
    assert (one_sd[ok] == 0).all()


# ----------------------------------------------------------------------------------------------- stats shards
def _fake(dist, ent, flags, tokens=17, model="fake"):
    r = SimpleNamespace(source="x.png", model_name=model, attentions=torch.zeros(1, 1, 1, tokens))
    return SimpleNamespace(result=r, mean_distances=lambda: dist, entropies=lambda: ent, artefact_grid=lambda: flags)


def test_stats_of_shards_equal_one_run_bit_for_bit(tmp_path):
    rng = np.random.default_rng(2)
    n = 120
    d = rng.uniform(0, 300, (n, 4, 3))
    e = rng.uniform(0, 5, (n, 4, 3))
    grids = [rng.random((2, 3) if i % 7 else (3, 3)) < 0.3 for i in range(n)]  # image 0 has a 3x3 grid
    single = StatsAccumulator()
    for i in range(n):
        single.add(_fake(d[i], e[i], grids[i], tokens=17 + (i == n - 1)))
    owner = rng.integers(0, 3, n)
    shards = [StatsAccumulator() for _ in range(3)]
    for i in range(n):
        shards[owner[i]].add(_fake(d[i], e[i], grids[i], tokens=17 + (i == n - 1)), index=i)
    for order in ([2, 0, 1], [1, 2, 0]):
        merged = StatsAccumulator()
        for j in order:
            merged.add_shard(shards[j])
        a, b = single.stats(), merged.stats()
        for f in ("distance_mean", "distance_sd", "entropy_mean", "entropy_sd", "artefact_frequency"):
            assert np.array_equal(getattr(a, f), getattr(b, f)), f
        assert (a.images, a.artefact_images, a.num_tokens) == (b.images, b.artefact_images, b.num_tokens) == \
            (n, sum(g.shape == (3, 3) for g in grids), 18)
    # the part file keeps every bit
    plan = ShardPlan("stats", (1, 3), n, "d", tuple((i, f"{i}.png", str(i)) for i in range(n) if owner[i] == 0))
    path = write_part(part_path(tmp_path / "out", (1, 3)), StatsPart(plan, shards[0], [("x.png", "bad")],
                                                                     {"precision": "fp32"}))
    back = read_part(path)
    assert back.plan == plan and back.failures == [("x.png", "bad")] and back.settings == {"precision": "fp32"}
    for k in ("distance", "entropy"):
        assert np.array_equal(back.accumulator.sums[k].hi, shards[0].sums[k].hi)
        assert np.array_equal(back.accumulator.squares[k].lo, shards[0].squares[k].lo)
    assert back.accumulator.stats().distance_sd.tolist() == shards[0].stats().distance_sd.tolist()
    assert {s: (g.images, g.first) for s, g in back.accumulator.grids.items()} == \
        {s: (g.images, g.first) for s, g in shards[0].grids.items()}


# ----------------------------------------------------------------------------------------------- coverage
def _plans(n_images: int, n: int, drop: int | None = None) -> list[ShardPlan]:
    ims = [InputImage(f"/d/{i}.png", f"im{i}") for i in range(n_images)]
    return [plan_shard("export", ims, (k, n)) for k in range(1, n + 1) if k != drop]


def _done(plans: list[ShardPlan], skip: set[str] = frozenset()) -> list[ShardResult]:
    return [ShardResult(p, Path(f"part-{p.shard[0]}"), {rel: i for i, _, rel in p.images if rel not in skip})
            for p in plans]


def test_coverage_complete_in_input_order():
    cov = check_coverage(_done(_plans(20, 3)), lambda s: f"p{s[0]}")
    assert cov.problems == [] and cov.shards == 3 and cov.images == 20
    assert [rel for rel, _ in cov.order] == [f"im{i}" for i in range(20)]
    assert [r.done[rel] for rel, r in cov.order] == list(range(20))


def test_coverage_names_what_is_missing_or_doubled():
    cov = check_coverage(_done(_plans(20, 3, drop=2)), lambda s: f"part-{s[0]}-of-{s[1]}")
    assert len(cov.problems) == 1 and cov.images == 20
    assert cov.problems[0].startswith("shard 2/3 is missing: no part-2-of-3 (run it: --shard 2/3, which is "
                                      "torchrun's RANK=1 and the job array's task 2 of 3)")
    plans = _plans(20, 3)
    undone = [rel for _, _, rel in plans[0].images[:2]]
    cov = check_coverage(_done(plans, set(undone)), str)
    assert cov.problems == [f"shard 1/3: 2 of {len(plans[0].images)} image(s) not done (/d/{undone[0][2:]}.png, "
                            f"/d/{undone[1][2:]}.png): run shard 1/3 again (it skips the images done)"]
    # shards given other inputs: one image in two shards, and the lists differ
    other = plan_shard("export", [InputImage(f"/d/{i}.png", f"im{i}") for i in range(21)], (2, 3))
    cov = check_coverage(_done([plans[0], other, plans[2]]), str)
    assert "shard 2/3 was given other inputs than shard 1/3 (21 image(s), not 20, or other names)" in cov.problems[0]
    twice = [p for p in cov.problems if "in two shards" in p]
    assert not twice or "(shard" in twice[0]
    clash = ShardPlan("export", (2, 3), 20, plans[0].digest, plans[1].images + plans[0].images[:1])
    cov = check_coverage(_done([plans[0], clash, plans[2]]), str)
    rel = plans[0].images[0][1]
    assert cov.problems == [f"1 image(s) in two shards: {rel} (shard 1/3 and shard 2/3)"]
    # two splits in one folder: every image twice
    cov = check_coverage(_done(_plans(6, 2) + _plans(6, 3)), str)
    assert len(cov.problems) == 1 and cov.shards == 0
    assert cov.problems[0].startswith("parts of 2 splits of the images (2 shards: part-1, part-2; 3 shards: part-1, "
                                      "part-2, part-3): delete the parts of the split you do not want; 6 image(s) "
                                      "done twice: /d/0.png (shard ")


# ----------------------------------------------------------------------------------------------- export
@pytest.fixture
def pipe(tiny_model):
    return Pipeline(tiny_model, precision="fp32")


def _images(folder: Path, n: int) -> Path:
    rng = np.random.default_rng(5)
    for i in range(n):
        p = folder / ("sub" if i % 2 else "") / f"i{i}.png"
        p.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (40, 48 + 8 * (i % 3), 3), dtype=np.uint8)).save(p)
    return folder


def _no_time(lines: list[dict]) -> list[dict]:
    out = []
    for x in lines:
        x = json.loads(json.dumps(x))
        if "run" in x:
            for k in ("started", "time", "merged"):
                x["run"].pop(k, None)
        x.pop("timings", None)
        out.append(x)
    return out


def manifest_lines(path: Path) -> list[dict]:
    return _no_time([json.loads(line) for line in path.read_text().splitlines()])


def maps(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and not p.name.startswith(("manifest", "."))}


def test_export_shards_merged_are_the_single_run_also_after_a_resume(pipe, tmp_path):
    folder = _images(tmp_path / "imgs", 6)
    # batch size 1: a batched backward may round another way for another batch (see docs/batch.md: bit for bit when each
    # image's numbers do not depend on its batch)
    opts = ExportOptions(views=("cls", "relevance"), format="npy", batch_size=1, precision="fp32", quiet=True)
    single = tmp_path / "single"
    export_images(pipe, [str(folder)], single, opts, log=lambda _: None)
    out = tmp_path / "sharded"
    for k in (1, 2, 3):
        export_images(pipe, [str(folder)], out, replace(opts, shard=(k, 3)), log=lambda _: None)
    # the largest shard "was killed" after its first image: the other images' records and maps were never written
    images, _ = expand_inputs([str(folder)])
    k = max((1, 2, 3), key=lambda k: sum(shard_of(im, 3) == k for im in images))
    mine = [im for im in images if shard_of(im, 3) == k]
    part = out / f"manifest-{k}-of-3.jsonl"
    lines = part.read_text().splitlines()
    assert len(mine) >= 3 and len(lines) == 1 + len(mine)
    part.write_text("\n".join(lines[:2]) + "\n")
    for line in lines[2:]:
        for f in json.loads(line)["files"]:
            (out / f).unlink()
    prep = prepare_export(out)
    try:
        assert prep.problems == [f"shard {k}/3: {len(mine) - 1} of {len(mine)} image(s) not done "
                                 f"({', '.join(im.path for im in mine[1:])}): run shard {k}/3 again (it skips the "
                                 "images done)"]
    finally:
        prep.release()
    assert not (out / "manifest.jsonl").exists()
    s = export_images(pipe, [str(folder)], out, replace(opts, shard=(k, 3)), log=lambda _: None)
    assert s.skipped == 1 and s.written == len(mine) - 1
    prep = prepare_export(out)
    try:
        assert prep.problems == [] and prep.failures == []
        written = prep.write()
    finally:
        prep.release()
    assert written == [out / "manifest.jsonl"]
    assert maps(out) == maps(single)
    assert manifest_lines(out / "manifest.jsonl") == manifest_lines(single / "manifest.jsonl")
    run = json.loads((out / "manifest.jsonl").read_text().splitlines()[0])["run"]
    assert run["merged"]["shards"] == 3 and run["merged"]["parts"][0] == "manifest-1-of-3.jsonl"
    assert [r["source"] for r in read_manifest(out / "manifest.jsonl")] == [im.path for im in images]
    # the merged folder resumes like a single run's: nothing left to do
    again = export_images(pipe, [str(folder)], out, opts, log=lambda _: None)
    assert again.skipped == 6 and again.written == 0


def test_stats_merge_of_an_empty_shard_and_failures(pipe, tmp_path):
    """A shard whose share is empty still writes its part; an image that failed in its shard is named and left out
    of the numbers, as one run leaves it out."""
    from vitviz.batch.stats import compute_stats

    folder = _images(tmp_path / "imgs", 3)
    (folder / "broken.png").write_bytes(b"not a png")
    images, _ = expand_inputs([str(folder)])
    out = tmp_path / "st"
    n = 5  # more shards than images: at least one is empty
    for k in range(1, n + 1):
        plan = plan_shard("stats", images, (k, n))
        todo = [InputImage(src, rel) for _, src, rel in plan.images]
        run = compute_stats(pipe, todo, indices=[i for i, _, _ in plan.images], log=lambda _: None)
        write_part(part_path(out, (k, n)), StatsPart(plan, run.accumulator, run.failures, {"precision": "fp32"}))
    assert any(not plan_shard("stats", images, (k, n)).images for k in range(1, n + 1))
    prep = prepare_stats(out)
    assert prep.problems == []
    assert [src for src, _ in prep.failures] == [str(folder / "broken.png")]
    prep.write()
    one = compute_stats(pipe, images, log=lambda _: None)
    from vitviz.batch.stats_files import read_stats_csv

    back = read_stats_csv(out / "attention_stats.csv")
    assert back.images == one.stats.images == 3
    np.testing.assert_allclose(back.distance_mean, one.stats.distance_mean, rtol=1e-5)
    assert math.isfinite(float(back.entropy_sd.sum()))
