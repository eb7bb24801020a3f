"""Killed anywhere, rerun, complete: ``vitviz export``, ``stats``, ``evaluate`` and ``merge`` are killed (SIGKILL in
the middle of a write, SIGINT just before one) at points drawn from a seeded generator over the events of a whole run
(every append and every atomic file: :mod:`kill_points`), then run again with the same command. The rerun skips
exactly the images whose records are whole, exits 0, and leaves what a run that was never killed leaves: the same
maps and numbers, a whole record for every image, no temporary or journal file."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
from bounded_runs import cli
from kill_points import count_events, killed_at
from PIL import Image

from vitviz.model import save_checkpoint

pytestmark = pytest.mark.slow

KILLS = 4  # kill points per command (half SIGKILL, half SIGINT)


@pytest.fixture
def inputs(tmp_path, tiny_model) -> tuple[Path, Path]:
    model = tmp_path / "m.safetensors"
    save_checkpoint(tiny_model, model)
    images = tmp_path / "imgs"
    images.mkdir()
    rng = np.random.default_rng(36)
    for i in range(5):
        Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(images / f"i{i}.png")
    return model, images


def _points(total: int, seed: int) -> list[tuple[int, str]]:
    """``KILLS`` distinct events of a run of ``total``, each with its signal, from a seeded generator."""
    rng = np.random.default_rng(seed)
    events = sorted(int(x) for x in rng.choice(np.arange(1, total + 1), size=min(KILLS, total), replace=False))
    return [(n, ("KILL", "INT")[i % 2]) for i, n in enumerate(events)]


def _leftovers(folder: Path) -> list[str]:
    """Temporary files and journals (hidden names ending .tmp or .pending)."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.name.endswith((".tmp", ".pending")))


def _maps(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*.npy"))}


def _whole_records(manifest: Path) -> list[dict]:
    if not manifest.is_file():
        return []
    lines = manifest.read_bytes().split(b"\n")
    return [r for x in lines[:-1] if "source" in (r := json.loads(x))]  # every line but a cut last one is whole


def test_export_killed_anywhere_reruns_to_the_same_folder(inputs, tmp_path, capsys):
    model, images = inputs

    def argv(out: Path) -> list[str]:
        return ["export", "--model", str(model), str(images), "--out", str(out), "--quiet", "--format", "npy",
                "--views", "cls,rollout", "--precision", "fp32", "--batch-size", "2"]

    fresh = tmp_path / "fresh"
    total = count_events(argv(fresh), tmp_path)
    reference = _maps(fresh)
    assert len(reference) == 10 and total > 5 * 3
    for k, (n, how) in enumerate(_points(total, seed=1)):
        out = tmp_path / f"killed-{k}"
        killed = killed_at(argv(out), n, how)
        assert killed.returncode in (-9, 0, 130), killed.stderr
        done = {r["source"] for r in _whole_records(out / "manifest.jsonl") if r["status"] == "ok"}
        for r in _whole_records(out / "manifest.jsonl"):  # a whole record's files are whole
            for f in r["files"]:
                assert np.load(io.BytesIO((out / f).read_bytes())).shape == np.load(fresh / f).shape
        status, err, _ = cli(argv(out), capsys)
        assert status == 0, (n, how, err)
        first = next(x for x in err if "image(s) to do" in x)
        assert f"{5 - len(done)} image(s) to do, {len(done)} already done" in first, (n, how, first)
        records = _whole_records(out / "manifest.jsonl")
        assert {r["source"] for r in records if r["status"] == "ok"} == {str(p) for p in images.iterdir()}
        assert _maps(out) == reference, (n, how)
        assert _leftovers(out) == [], (n, how)


def test_stats_killed_anywhere_reruns_to_the_same_numbers(inputs, tmp_path, capsys):
    model, images = inputs

    def argv(out: Path) -> list[str]:
        return ["stats", "--model", str(model), str(images), "--out", str(out), "--quiet", "--precision", "fp32"]

    fresh = tmp_path / "fresh"
    total = count_events(argv(fresh), tmp_path)
    reference = (fresh / "attention_stats.csv").read_bytes()
    for k, (n, how) in enumerate(_points(total, seed=2)):
        out = tmp_path / f"killed-{k}"
        killed = killed_at(argv(out), n, how)
        assert killed.returncode in (-9, 0, 130), killed.stderr
        status, err, _ = cli(argv(out), capsys)
        assert status == 0, (n, how, err)
        assert (out / "attention_stats.csv").read_bytes() == reference
        assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in fresh.iterdir())
        assert _leftovers(out) == [], (n, how)


def test_evaluate_killed_anywhere_reruns_to_the_same_table(inputs, tmp_path, capsys):
    model, images = inputs

    def argv(csv: Path) -> list[str]:
        return ["evaluate", str(model), str(images), "--steps", "2", "--seeds", "1", "--views", "rollout", "--csv",
                str(csv)]

    (tmp_path / "fresh").mkdir()
    fresh = tmp_path / "fresh" / "auc.csv"
    total = count_events(argv(fresh), tmp_path)
    for k, (n, how) in enumerate(_points(total, seed=3)):
        folder = tmp_path / f"killed-{k}"
        folder.mkdir()
        killed = killed_at(argv(folder / "auc.csv"), n, how)
        assert killed.returncode in (-9, 0, 130), killed.stderr
        status, err, _ = cli(argv(folder / "auc.csv"), capsys)
        assert status == 0, (n, how, err)
        assert (folder / "auc.csv").read_bytes() == fresh.read_bytes()
        assert _leftovers(folder) == [], (n, how)


def test_merge_killed_anywhere_reruns_to_the_same_files(inputs, tmp_path, capsys):
    model, images = inputs

    def shards(out: Path) -> None:
        for k in (1, 2):
            assert cli(["export", "--model", str(model), str(images), "--out", str(out), "--quiet", "--format",
                        "npy", "--views", "cls", "--precision", "fp32", "--shard", f"{k}/2"], capsys)[0] == 0
            assert cli(["stats", "--model", str(model), str(images), "--out", str(out), "--quiet", "--precision",
                        "fp32", "--shard", f"{k}/2"], capsys)[0] == 0

    fresh = tmp_path / "fresh"
    shards(fresh)
    total = count_events(["merge", str(fresh)], tmp_path)
    merged = {p.name: p.read_bytes() for p in fresh.iterdir() if p.suffix in (".csv", ".jsonl")}
    assert "manifest.jsonl" in merged and "attention_stats.csv" in merged
    for k, (n, how) in enumerate(_points(total, seed=4)):
        out = tmp_path / f"killed-{k}"
        shards(out)
        killed = killed_at(["merge", str(out)], n, how)
        assert killed.returncode in (-9, 0, 130), killed.stderr
        status, err, _ = cli(["merge", str(out)], capsys)
        assert status == 0, (n, how, err)
        again = {p.name: p.read_bytes() for p in out.iterdir() if p.suffix in (".csv", ".jsonl")}
        assert again.keys() == merged.keys()
        assert again["attention_stats.csv"] == merged["attention_stats.csv"]
        assert [json.loads(x).get("source") for x in again["manifest.jsonl"].splitlines()] == \
            [json.loads(x).get("source") for x in merged["manifest.jsonl"].splitlines()]
        assert _leftovers(out) == [], (n, how)
