"""`vitviz export`, `stats` and `evaluate` under torchrun's or SLURM's variables, one shard started as a launcher
starts it (`python -m vitviz`, torchrun's module entry, in a subprocess) while the other runs in this process, and
`vitviz merge` of their parts: equal to one run over all the images, file for file (maps, manifest, CSVs, figure; the
statistics bit for bit); a missing or doubled shard named, nothing written.

The subprocess gets this process's thread count (a float sum may round another way with another number of threads:
torchrun itself sets OMP_NUM_THREADS=1). The export uses batch size 1: a batched backward may round another way for
another batch (docs/batch.md, "Many GPUs and clusters")."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from vitviz.batch.inputs import expand_inputs
from vitviz.batch.stats import StatsAccumulator, compute_stats
from vitviz.batch.stats_files import read_part
from vitviz.cli import main
from vitviz.model import save_checkpoint
from vitviz.model.sources.refs import load_model
from vitviz.pipeline import Pipeline

LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "SLURM_ARRAY_TASK_ID",
                      "SLURM_ARRAY_TASK_COUNT", "SLURM_ARRAY_TASK_MIN", "SLURM_ARRAY_TASK_MAX", "SLURM_ARRAY_TASK_STEP",
                      "SLURM_PROCID", "SLURM_NTASKS", "SLURM_NPROCS")


@pytest.fixture
def world(tmp_path, tiny_model):
    model = tmp_path / "m.safetensors"
    save_checkpoint(tiny_model, model)
    rng = np.random.default_rng(4)
    for i in range(4):
        p = tmp_path / "imgs" / ("sub" if i % 2 else "") / f"i{i}.png"
        p.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(rng.integers(0, 256, (40, 48 + 8 * (i % 3), 3), dtype=np.uint8)).save(p)
    return tmp_path, model, tmp_path / "imgs"


def launch(argv: list[str], variables: dict[str, str], cwd: Path) -> subprocess.Popen:
    """``python -m vitviz ARGV`` with the launcher's ``variables`` (and no others), this process's thread count."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES}
    env.update(OMP_NUM_THREADS=str(torch.get_num_threads()), **variables)
    return subprocess.Popen([sys.executable, "-m", "vitviz", *argv], env=env, cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(procs: list[subprocess.Popen]) -> list[tuple[int, str, str]]:
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=300)
        out.append((p.returncode, stdout, stderr))
    return out


def files(out: Path) -> dict[str, bytes]:
    """Every file of a folder but the manifests, the shards' parts and hidden files."""
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file() and not p.name.startswith(("manifest", ".")) and "-of-" not in p.name}


def manifest(path: Path) -> list[dict]:
    """The manifest's lines without what differs from run to run (times)."""
    lines = []
    for line in path.read_text().splitlines():
        x = json.loads(line)
        if "run" in x:
            for k in ("started", "time", "merged"):
                x["run"].pop(k, None)
        x.pop("timings", None)
        lines.append(x)
    return lines


def test_export_under_torchrun_merges_into_the_single_run(world, capsys, monkeypatch):
    root, model, imgs = world
    args = ["export", "--model", str(model), str(imgs), "--views", "cls,relevance", "--format", "both",
            "--batch-size", "1", "--precision", "fp32", "--quiet", "--out"]
    torchrun = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}
    [proc] = [launch(args + [str(root / "sharded")], {**torchrun, "RANK": "1", "LOCAL_RANK": "1"}, root)]
    with monkeypatch.context() as env:  # meanwhile, rank 0 in this process, then the single run
        for k, v in {**torchrun, "RANK": "0", "LOCAL_RANK": "0"}.items():
            env.setenv(k, v)
        assert main(args + [str(root / "sharded")]) == 0
    first = capsys.readouterr().err.splitlines()[0]
    assert first == "vitviz export: shard 1/2 from torchrun (RANK=0, WORLD_SIZE=2), device cpu"
    assert main(args + [str(root / "single")]) == 0
    [(status, _, err)] = finish([proc])
    assert status == 0, err
    assert err.splitlines()[0] == "vitviz export: shard 2/2 from torchrun (RANK=1, WORLD_SIZE=2), device cpu"
    sharded = root / "sharded"
    plan = json.loads((sharded / "manifest-2-of-2.plan.json").read_text())
    assert plan["origin"] == "torchrun (RANK=1, WORLD_SIZE=2)" and plan["inputs"] == 4
    capsys.readouterr()
    assert main(["merge", str(sharded)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [f"vitviz merge: export: 2 part(s) of 2 shard(s), 4 of 4 image(s) done -> {sharded}/manifest.jsonl",
                   f"vitviz merge: wrote {sharded}/manifest.jsonl"]
    single = files(root / "single")
    assert len(single) == 4 * 4 and files(sharded) == single  # 2 views x (npy, png) per image, byte for byte
    assert manifest(sharded / "manifest.jsonl") == manifest(root / "single" / "manifest.jsonl")


def test_stats_of_a_slurm_array_from_4_merge_to_the_same_numbers(world, capsys, monkeypatch):
    root, model, imgs = world
    args = ["stats", "--model", str(model), str(imgs), "--precision", "fp32", "--quiet", "--out"]
    array = {"SLURM_ARRAY_TASK_MIN": "4", "SLURM_ARRAY_TASK_MAX": "5", "SLURM_ARRAY_TASK_COUNT": "2",
             "SLURM_PROCID": "0", "SLURM_NTASKS": "1"}  # sbatch --array=4-5: each task is an sbatch job's task 0 of 1
    proc = launch(args + [str(root / "sharded")], {**array, "SLURM_ARRAY_TASK_ID": "5"}, root)
    with monkeypatch.context() as env:
        for k, v in {**array, "SLURM_ARRAY_TASK_ID": "4"}.items():
            env.setenv(k, v)
        assert main(args + [str(root / "sharded")]) == 0
    assert capsys.readouterr().err.splitlines()[0] == (
        "vitviz stats: shard 1/2 from SLURM array (SLURM_ARRAY_TASK_ID=4, SLURM_ARRAY_TASK_COUNT=2, "
        "SLURM_ARRAY_TASK_MIN=4), device cpu")
    assert main(args + [str(root / "single")]) == 0
    [(status, _, err)] = finish([proc])
    assert status == 0, err
    assert err.splitlines()[0] == ("vitviz stats: shard 2/2 from SLURM array (SLURM_ARRAY_TASK_ID=5, "
                                   "SLURM_ARRAY_TASK_COUNT=2, SLURM_ARRAY_TASK_MIN=4), device cpu")
    sharded = root / "sharded"
    assert sorted(p.name for p in sharded.iterdir()) == ["attention_stats-1-of-2.npz", "attention_stats-2-of-2.npz"]
    code = ("import sys; from vitviz.cli import main; assert main(['merge', sys.argv[1]]) == 0; "
            "assert 'torch' not in sys.modules, 'torch'")  # a merge reads files: no torch (a cluster's login node)
    r = subprocess.run([sys.executable, "-c", code, str(sharded)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    single = files(root / "single")
    assert sorted(single) == ["artefact_frequency.csv", "attention_stats.csv", "attention_stats.png",
                              "attention_stats.svg"]
    assert files(sharded) == single  # the CSVs and the figure, byte for byte
    # and the numbers themselves, bit for bit (the CSV rounds them to 6 digits)
    acc = StatsAccumulator()
    for k in (2, 1):
        acc.add_shard(read_part(sharded / f"attention_stats-{k}-of-2.npz").accumulator)
    images, _ = expand_inputs([str(imgs)])
    one = compute_stats(Pipeline(load_model(str(model)), precision="fp32"), images).stats
    merged = acc.stats()
    for f in ("distance_mean", "distance_sd", "entropy_mean", "entropy_sd", "artefact_frequency"):
        assert np.array_equal(getattr(merged, f), getattr(one, f)), f


def test_evaluate_under_srun_merges_into_the_single_csv_and_mean(world, capsys, monkeypatch):
    root, model, imgs = world
    (root / "sharded").mkdir()
    args = ["evaluate", str(model), str(imgs), "--views", "rollout,cls_last", "--steps", "3", "--seeds", "2", "--csv"]
    proc = launch(args + [str(root / "sharded" / "auc.csv")], {"SLURM_PROCID": "1", "SLURM_NTASKS": "2"}, root)
    with monkeypatch.context() as env:
        env.setenv("SLURM_PROCID", "0")
        env.setenv("SLURM_NTASKS", "2")
        assert main(args + [str(root / "sharded" / "auc.csv")]) == 0
    assert capsys.readouterr().err.splitlines()[0] == ("vitviz evaluate: shard 1/2 from SLURM tasks (SLURM_PROCID=0, "
                                                       "SLURM_NTASKS=2), device cpu")
    assert main(args + [str(root / "auc.csv")]) == 0
    single_out = capsys.readouterr().out
    [(status, _, err)] = finish([proc])
    assert status == 0, err
    assert err.splitlines()[0] == "vitviz evaluate: shard 2/2 from SLURM tasks (SLURM_PROCID=1, SLURM_NTASKS=2), " \
                                  "device cpu"
    assert main(["merge", str(root / "sharded")]) == 0
    got = capsys.readouterr()
    assert (root / "sharded" / "auc.csv").read_bytes() == (root / "auc.csv").read_bytes()
    mean = single_out[single_out.index("mean over 4 images"):]
    assert got.out == mean  # the last block of the single run's output


def test_a_missing_or_doubled_shard_is_named_and_nothing_written(world, capsys):
    root, model, imgs = world
    out = root / "st"
    base = ["stats", "--model", str(model), str(imgs), "--out", str(out), "--precision", "fp32", "--quiet"]
    assert main(base + ["--shard", "1/3"]) == 0
    assert main(base + ["--shard", "3/3"]) == 0
    before = sorted(p.name for p in out.iterdir())
    capsys.readouterr()
    assert main(["merge", str(out)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[1] == ("vitviz merge: stats: shard 2/3 is missing: no attention_stats-2-of-3.npz (run it: --shard 2/3, "
                      "which is torchrun's RANK=1 and the job array's task 2 of 3)")
    assert err[-1] == "vitviz merge: nothing written" and len(err) == 3
    assert sorted(p.name for p in out.iterdir()) == before
    # a second split in the same folder: every image it holds is done twice
    for k in (1, 2):
        assert main(base + ["--shard", f"{k}/2"]) == 0
    capsys.readouterr()
    assert main(["merge", str(out)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[1].startswith("vitviz merge: stats: parts of 2 splits of the images (2 shards: attention_stats-1-of-2"
                             ".npz, attention_stats-2-of-2.npz; 3 shards: attention_stats-1-of-3.npz, "
                             "attention_stats-3-of-3.npz): delete the parts of the split you do not want; ")
    assert "image(s) done twice: " in err[1] and str(imgs / "i0.png") + " (shard" in err[1]


def test_bad_launcher_variable_in_a_subprocess(world):
    root, model, imgs = world
    [(status, stdout, err)] = finish([launch(["export", "--model", str(model), str(imgs), "--out", str(root / "o")],
                                             {"RANK": "1", "WORLD_SIZE": "1"}, root)])
    assert status == 2 and stdout == ""
    assert err.splitlines() == ["vitviz export: error: RANK=1: must be between 0 and WORLD_SIZE - 1 = 0 (give "
                                "--shard K/N to choose the shard yourself)"]
    assert not (root / "o").exists()
