"""`vitviz stats` (vitviz.batch.stats): per-layer-and-head distance and entropy over images, artefact frequency, CSV and
figure. The numbers are checked against the window's own per-image numbers (a Session on `Pipeline.run`)."""

from __future__ import annotations

import csv
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

from vitviz.batch.stats import ARTEFACT_CSV, FIGURE, STATS_CSV, DatasetStats, StatsAccumulator
from vitviz.batch.stats_files import read_stats_csv, write_outputs
from vitviz.batch.stats_plot import figure_bytes
from vitviz.cli import main
from vitviz.demo import generate, load_demo_model
from vitviz.document.session import Session
from vitviz.imaging import load_image
from vitviz.pipeline import Pipeline


def _images(folder: Path, n: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        p = folder / f"s{i:02d}.png"
        Image.fromarray(generate(i, stream="test", size=(112, 112 + 8 * (i % 3))).image).save(p)
        out.append(p)
    return out


def _rows(path: Path) -> list[dict]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def test_stats_are_the_mean_and_spread_of_the_window_numbers(tmp_path, capsys):
    paths = _images(tmp_path / "imgs", 6)
    out = tmp_path / "stats"
    assert main(["stats", "--model", "demo", str(tmp_path / "imgs"), "--out", str(out), "--batch-size", "4",
                 "--precision", "fp32", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert "6 image(s), 0 failed" in err and "fp32" in err
    # the window's numbers, image by image
    pipe = Pipeline(load_demo_model(), precision="fp32")
    dist, ent, flags = [], [], []
    for p in paths:
        s = Session()
        s.set_result(pipe.run(load_image(p), source=str(p)))
        dist.append(s.mean_distances())
        ent.append(s.entropies())
        flags.append(s.artefact_grid())
    dist, ent, flags = np.stack(dist), np.stack(ent), np.stack(flags)
    rows = _rows(out / STATS_CSV)
    L, H = dist.shape[1:]
    assert len(rows) == L * H == 4 * 2
    for r in rows:
        l, h = int(r["layer"]), int(r["head"])
        assert r["model"] == "vitviz shapes demo (ViT 112/8)" and r["images"] == "6" and r["precision"] == "fp32"
        np.testing.assert_allclose(float(r["mean_distance_px"]), dist[:, l, h].mean(), rtol=1e-4)
        np.testing.assert_allclose(float(r["sd_distance_px"]), dist[:, l, h].std(ddof=1), rtol=1e-3, atol=1e-4)
        np.testing.assert_allclose(float(r["mean_entropy_nats"]), ent[:, l, h].mean(), rtol=1e-4)
        np.testing.assert_allclose(float(r["sd_entropy_nats"]), ent[:, l, h].std(ddof=1), rtol=1e-3, atol=1e-5)
    art = _rows(out / ARTEFACT_CSV)
    assert len(art) == 14 * 14
    freq = flags.mean(0)
    for r in art:
        assert float(r["flagged_fraction"]) == pytest.approx(freq[int(r["row"]), int(r["col"])], abs=1e-6)
        assert int(r["flagged_images"]) == int(flags[:, int(r["row"]), int(r["col"])].sum())
    with Image.open(out / f"{FIGURE}.png") as im:
        assert im.width > 1000 and im.height > 300
    svg = (out / f"{FIGURE}.svg").read_text()
    for text in ("mean attention distance (input px)", "mean attention entropy (nats)", "network depth (layer)",
                 "head 0", "head 1", "mean ± 1 sd over images", "uniform attention (ln 197)", "patch column",
                 "patch row", "fraction of images flagged", "6 images", "computed in fp32"):
        assert text in svg, text
    # the window reads the CSV back
    back = read_stats_csv(out / STATS_CSV)
    assert back.images == 6 and back.distance_mean.shape == (L, H) and back.precision == "fp32"
    np.testing.assert_allclose(back.distance_mean, dist.mean(0), rtol=1e-4)


def _fake(dist, ent, grid_flags, tokens=197, source="x.png"):
    r = SimpleNamespace(source=source, model_name="fake", attentions=torch.zeros(1, 1, 1, tokens))
    return SimpleNamespace(result=r, mean_distances=lambda: dist, entropies=lambda: ent,
                           artefact_grid=lambda: grid_flags)


def test_accumulator_against_numpy():
    rng = np.random.default_rng(0)
    d = rng.uniform(0, 100, (7, 3, 4))
    e = rng.uniform(0, 5, (7, 3, 4))
    f = rng.random((7, 2, 3)) < 0.3
    acc = StatsAccumulator()
    for i in range(7):
        acc.add(_fake(d[i], e[i], f[i]))
    acc.add(_fake(d[0], e[0], np.ones((3, 3), bool)))  # another grid: in the distances, not in the frequency
    s = acc.stats()
    dd = np.concatenate([d, d[:1]])
    ee = np.concatenate([e, e[:1]])
    assert s.images == 8 and s.artefact_images == 7 and s.num_tokens == 197
    np.testing.assert_allclose(s.distance_mean, dd.mean(0), rtol=1e-12)
    np.testing.assert_allclose(s.distance_sd, dd.std(0, ddof=1), rtol=1e-9)
    np.testing.assert_allclose(s.entropy_sd, ee.std(0, ddof=1), rtol=1e-9)
    np.testing.assert_allclose(s.artefact_frequency, f.mean(0))
    with pytest.raises(ValueError, match="layers"):
        acc.add(_fake(np.zeros((2, 4)), np.zeros((2, 4)), None, source="odd.png"))
    one = StatsAccumulator()
    one.add(_fake(d[0], e[0], f[0]))
    assert (one.stats().distance_sd == 0).all()
    with pytest.raises(ValueError, match="no image"):
        StatsAccumulator().stats()


def test_figure_shows_flagged_patches_and_many_heads(tmp_path):
    L, H = 12, 12
    rng = np.random.default_rng(1)
    freq = np.zeros((14, 14))
    freq[2, 11] = 0.75
    stats = DatasetStats(model="ViT-B/16", images=128, distance_mean=np.sort(rng.uniform(10, 120, (L, H)), 0),
                         distance_sd=np.full((L, H), 5.0), entropy_mean=rng.uniform(1, 5, (L, H)),
                         entropy_sd=np.full((L, H), 0.2), artefact_frequency=freq, artefact_images=128,
                         num_tokens=197)
    written = write_outputs(stats, tmp_path / "o")
    assert sorted(p.name for p in written) == sorted([STATS_CSV, ARTEFACT_CSV, f"{FIGURE}.png", f"{FIGURE}.svg"])
    svg = figure_bytes(stats, "svg").decode()
    assert "head 11" in svg and "128 images" in svg and "no patch flagged" not in svg
    rows = _rows(tmp_path / "o" / ARTEFACT_CSV)
    hit = [r for r in rows if r["flagged_images"] != "0"]
    assert [(r["row"], r["col"], r["flagged_fraction"], r["flagged_images"]) for r in hit] == [("2", "11", "0.75",
                                                                                                  "96")]
    with pytest.raises(FileExistsError, match="--overwrite"):
        write_outputs(stats, tmp_path / "o")
    write_outputs(stats, tmp_path / "o", overwrite=True)
    empty = DatasetStats(model="m", images=3, distance_mean=np.ones((2, 2)), distance_sd=np.zeros((2, 2)),
                         entropy_mean=np.ones((2, 2)), entropy_sd=np.zeros((2, 2)), artefact_frequency=np.zeros((4, 4)),
                         artefact_images=3)
    assert "no patch flagged" in figure_bytes(empty, "svg").decode()


def test_read_stats_csv_refuses_other_files(tmp_path):
    for name, content, needle in (("a.csv", "x,y\n1,2\n", "missing columns"),
                                  ("b.csv", b"\xff\xfe\x00\x01", "not a text file"),
                                  ("c.csv", "model,images,layer,head,mean_distance_px,sd_distance_px,"
                                            "mean_entropy_nats,sd_entropy_nats\nm,2,0,0,1,0,1,0\nm,2,1,1,1,0,1,0\n",
                                   "layers or heads are missing"),
                                  ("d.csv", "model,images,layer,head,mean_distance_px,sd_distance_px,"
                                            "mean_entropy_nats,sd_entropy_nats\nm,2,0,0,one,0,1,0\n",
                                   "could not convert")):
        p = tmp_path / name
        p.write_bytes(content if isinstance(content, bytes) else content.encode())
        with pytest.raises(ValueError) as e:
            read_stats_csv(p)
        assert str(p) in str(e.value) and needle in str(e.value)
    with pytest.raises(ValueError, match="cannot read"):
        read_stats_csv(tmp_path / "missing.csv")


def test_stats_cli_failures_and_refusals(tmp_path, capsys):
    _images(tmp_path / "imgs", 3)
    (tmp_path / "imgs" / "bad.png").write_bytes(b"not an image")
    out = tmp_path / "stats"
    status = main(["stats", "--model", "demo", str(tmp_path / "imgs"), "--out", str(out), "--quiet"])
    assert status == 64 + 1
    err = capsys.readouterr().err
    assert f"{tmp_path / 'imgs' / 'bad.png'}: not an image file" in err and "3 image(s), 1 failed" in err
    assert _rows(out / STATS_CSV)[0]["images"] == "3"
    before = (out / STATS_CSV).read_bytes()
    assert main(["stats", "--model", "demo", str(tmp_path / "imgs"), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "already exists" in err and "--overwrite" in err
    assert (out / STATS_CSV).read_bytes() == before
    assert main(["stats", "--model", "demo", str(tmp_path / "nothing*.png"), "--out", str(tmp_path / "o2")]) == 2
    only_bad = tmp_path / "bad_only"
    only_bad.mkdir()
    (only_bad / "x.png").write_bytes(b"junk")
    capsys.readouterr()
    assert main(["stats", "--model", "demo", str(only_bad), "--out", str(tmp_path / "o3"), "--quiet"]) == 2
    assert "none of the 1 image(s) could be analysed" in capsys.readouterr().err
    assert not (tmp_path / "o3" / STATS_CSV).exists()
    for bad, needle in ((["--batch-size", "0"], "--batch-size 0"), (["--device", "cuda:5"], "not available")):
        assert main(["stats", "--model", "demo", str(tmp_path / "imgs"), "--out", str(tmp_path / "o4")] + bad) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needle in err


def test_the_stats_csv_says_its_precision_and_an_older_csv_without_it_still_reads(tmp_path):
    from dataclasses import replace

    from vitviz.batch.stats import STATS_COLUMNS, DatasetStats
    from vitviz.batch.stats_files import csv_bytes, stats_rows, write_outputs

    L, H = 2, 3
    stats = DatasetStats(model="m", images=2, distance_mean=np.ones((L, H)), distance_sd=np.zeros((L, H)),
                         entropy_mean=np.ones((L, H)), entropy_sd=np.zeros((L, H)))
    write_outputs(replace(stats, precision="bf16"), tmp_path / "o")
    assert {r["precision"] for r in _rows(tmp_path / "o" / STATS_CSV)} == {"bf16"}
    assert read_stats_csv(tmp_path / "o" / STATS_CSV).precision == "bf16"
    assert "computed in bf16" in (tmp_path / "o" / f"{FIGURE}.svg").read_text()
    old = tmp_path / "old.csv"  # written before the column existed
    old.write_bytes(csv_bytes(STATS_COLUMNS[:-1], [row[:-1] for row in stats_rows(stats)]))
    back = read_stats_csv(old)
    assert back.precision == "" and back.distance_mean.shape == (L, H)
