"""The corpus of bad inputs of ``vitviz merge`` and of the launchers' variables (``vitviz export``, ``stats``,
``evaluate`` started under torchrun or SLURM with values those never set).

Every case runs the real command line (``vitviz.cli.main`` in this process; the tiny model of conftest's
``tiny_model`` written into tmp_path, three small images, the shards made with ``--shard K/N``) and has an exact
expectation:

* a refusal: exit status 2, exactly one stderr line ``vitviz COMMAND: error: ...`` naming the file, folder or
  variable and the cause, nothing on stdout, and nothing written or changed under tmp_path;
* a merge that finds an image missing or doubled: exit status 1, its lines, ``nothing written``, nothing changed;
* a merge over an earlier merge with ``--overwrite``: exit 0.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from bounded_runs import cli, snapshot
from PIL import Image

from vitviz.cli import main
from vitviz.model import create_model, save_checkpoint

EXPORT = ["--quiet", "--format", "npy", "--views", "cls", "--precision", "fp32", "--batch-size", "1"]


def _tiny_model():
    """conftest's ``tiny_model``, for a module-wide fixture."""
    torch.manual_seed(0)
    m = create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, embed_dim=32, depth=3, num_heads=4,
                     num_classes=5)
    m.spec = m.spec.replace(labels=("circle", "square", "star", "cross", "heart"), name="tiny test ViT")
    return m.eval()






def refused(status: int, err: list[str], stdout: str, command: str, *needles: str) -> str:
    assert status == 2, (status, err)
    assert len(err) == 1, err
    line = err[0]
    assert line.startswith(f"vitviz {command}: error: "), line
    assert "Traceback" not in line
    for n in needles:
        assert n in line, (n, line)
    assert stdout == "", stdout
    return line


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A model, three images, an export's two shards (``exp``), a stats run's two shards (``st``) and an evaluation's
    two shards (``ev``), made once; each case works on a copy."""
    root = tmp_path_factory.mktemp("merge_template")
    save_checkpoint(_tiny_model(), root / "m.safetensors")
    other = _tiny_model()
    with torch.no_grad():
        other.blocks[-1].attn.qkv.weight.mul_(-1.0)
    save_checkpoint(other, root / "other.safetensors")
    rng = np.random.default_rng(3)
    (root / "imgs").mkdir()
    for i in (0, 4, 5):  # i0 in shard 2 of 2, i4 and i5 in shard 1
        Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(root / "imgs" / f"i{i}.png")
    (root / "ev").mkdir()
    for k in (1, 2):
        shard = ["--shard", f"{k}/2"]
        assert main(["export", "--model", str(root / "m.safetensors"), str(root / "imgs"), "--out",
                     str(root / "exp"), *EXPORT, *shard]) == 0
        assert main(["stats", "--model", str(root / "m.safetensors"), str(root / "imgs"), "--out", str(root / "st"),
                     "--precision", "fp32", "--quiet", *shard]) == 0
        assert main(["evaluate", str(root / "m.safetensors"), str(root / "imgs"), "--views", "rollout", "--steps",
                     "2", "--seeds", "2", "--csv", str(root / "ev" / "auc.csv"), *shard]) == 0
    return root


@pytest.fixture
def w(template, tmp_path) -> Path:
    root = tmp_path / "w"
    shutil.copytree(template, root)
    return root


def _append(path: Path, text: str) -> None:
    with path.open("a") as f:
        f.write(text)


def _edit_json(path: Path, edit) -> None:
    value = json.loads(path.read_text())
    edit(value)
    path.write_text(json.dumps(value))


def _npz(path: Path, edit) -> None:
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    edit(arrays)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    path.write_bytes(buf.getvalue())


def _settings(path: Path, **changes) -> None:
    def edit(a):
        meta = json.loads(str(a["meta"][()]))
        meta["settings"].update(changes)
        a["meta"] = np.array(json.dumps(meta))
    _npz(path, edit)


# ------------------------------------------------------------------------------------------------ refusals
def _other_views_shard(w: Path) -> None:
    """Shard 2 of the export again, with other views (the folder itself would refuse it: made in another folder, then
    put in place of the first shard 2)."""
    other = w / "exp2"
    assert main(["export", "--model", str(w / "m.safetensors"), str(w / "imgs"), "--out", str(other),
                 *EXPORT[:4], "rollout", *EXPORT[5:], "--shard", "2/2"]) == 0
    part = w / "exp" / "manifest-2-of-2.jsonl"
    for line in part.read_text().splitlines():
        for f in json.loads(line).get("files", []):
            (w / "exp" / f).unlink()
    for p in other.iterdir():
        shutil.move(str(p), w / "exp" / p.name)
    shutil.rmtree(other)


CASES = [  # (id, folder, how the folder is damaged, what the line must say)
    ("folder missing", "nope", None, ["nope: no such folder (give the folder the shards wrote into)"]),
    ("a file, not a folder", "a_file", lambda w: (w / "a_file").write_text("x"), ["a_file: not a folder"]),
    ("no parts", "imgs", None, ["imgs holds no parts of a sharded vitviz export, stats or evaluate"]),
    ("export plan not JSON", "exp", lambda w: (w / "exp" / "manifest-1-of-2.plan.json").write_text("{oops"),
     ["manifest-1-of-2.plan.json: not a part written by vitviz (not JSON"]),
    ("export plan not a plan", "exp", lambda w: (w / "exp" / "manifest-1-of-2.plan.json").write_text("[1, 2]"),
     ["manifest-1-of-2.plan.json: not the plan of a shard written by vitviz"]),
    ("export plan of another shard", "exp",
     lambda w: shutil.copy(w / "exp" / "manifest-2-of-2.plan.json", w / "exp" / "manifest-1-of-2.plan.json"),
     ["manifest-1-of-2.plan.json: the plan of export shard 2/2, not of this export shard"]),
    ("export manifest line changed by hand", "exp",
     lambda w: _append(w / "exp" / "manifest-1-of-2.jsonl", '{"source": 3}\n'),
     ["manifest-1-of-2.jsonl line ", ": not a line of vitviz export", "changed by hand"]),
    ("export shards with other views", "exp", _other_views_shard,
     ["shard 2/2 was made with other settings than shard 1/2: --views cls in shard 1/2, rollout in shard 2/2"]),
    ("export: an earlier merge", "exp", lambda w: main(["merge", str(w / "exp")]),
     ["manifest.jsonl already exists (an earlier merge; pass --overwrite to replace it)"]),
    ("stats part not npz", "st", lambda w: (w / "st" / "attention_stats-2-of-2.npz").write_bytes(b"PK\x03\x04 no"),
     ["attention_stats-2-of-2.npz: not a part of vitviz stats (not an npz file"]),
    ("stats part without its description", "st",
     lambda w: _npz(w / "st" / "attention_stats-1-of-2.npz", lambda a: a.pop("meta")),
     ["attention_stats-1-of-2.npz: not a complete part of vitviz stats (KeyError: 'meta')"]),
    ("stats part with a sum changed", "st",
     lambda w: _npz(w / "st" / "attention_stats-1-of-2.npz", lambda a: a.update(distance_sum_lo=-a["distance_sum_lo"]
                                                                                 - 1)),
     ["attention_stats-1-of-2.npz: not a complete part of vitviz stats (ValueError: distance_sum: not the arrays "
      "of an exact sum)"]),
    ("stats part of another shard", "st",
     lambda w: shutil.copy(w / "st" / "attention_stats-2-of-2.npz", w / "st" / "attention_stats-1-of-2.npz"),
     ["attention_stats-1-of-2.npz: holds stats shard 2/2, not the shard its name says"]),
    ("stats shards of other models", "st",
     lambda w: _settings(w / "st" / "attention_stats-2-of-2.npz", model_sha256="0" * 64),
     ["shard 2/2 was made with other settings than shard 1/2: the model (sha256 ", " in shard 2/2)"]),
    ("stats shards in other precisions", "st",
     lambda w: _settings(w / "st" / "attention_stats-2-of-2.npz", precision="bf16"),
     ["--precision fp32 in shard 1/2, bf16 in shard 2/2"]),
    ("stats: the outputs exist", "st", lambda w: (w / "st" / "attention_stats.csv").write_text("mine"),
     ["attention_stats.csv already exists (pass --overwrite to replace it)"]),
    ("evaluate part not JSON", "ev", lambda w: (w / "ev" / "auc-1-of-2.evaluate.json").write_text("nope"),
     ["auc-1-of-2.evaluate.json: not a part of vitviz evaluate (not JSON"]),
    ("evaluate part naming a CSV elsewhere", "ev",
     lambda w: _edit_json(w / "ev" / "auc-1-of-2.evaluate.json", lambda v: v.update(csv="../auc.csv")),
     ["auc-1-of-2.evaluate.json: not a complete part of vitviz evaluate (ValueError: csv '../auc.csv')"]),
    ("evaluate part with a table cut", "ev",
     lambda w: _edit_json(w / "ev" / "auc-2-of-2.evaluate.json", lambda v: v["tables"][0].pop("random")),
     ["auc-2-of-2.evaluate.json: not a complete part of vitviz evaluate (KeyError: 'random')"]),
    ("evaluate shards with other steps", "ev",
     lambda w: _edit_json(w / "ev" / "auc-2-of-2.evaluate.json", lambda v: v["settings"].update(steps=5)),
     ["shard 2/2 was made with other settings than shard 1/2: --steps 2 in shard 1/2, 5 in shard 2/2"]),
    ("evaluate: the CSV exists", "ev", lambda w: (w / "ev" / "auc.csv").write_text("mine"),
     ["auc.csv already exists (pass --overwrite to replace it)"]),
]


@pytest.mark.parametrize("name,folder,damage,needles", CASES, ids=[c[0] for c in CASES])
def test_merge_refuses(w, capsys, name, folder, damage, needles):
    if damage is not None:
        damage(w)
    capsys.readouterr()
    before = snapshot(w)
    line = refused(*cli(["merge", str(w / folder)], capsys), "merge", *needles)
    assert snapshot(w) == before, line


def test_merge_refuses_while_a_shard_runs(w, capsys):
    """A lock of a live export (another process here) on the folder: the merge waits for nobody and says who."""
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        with open(f"/proc/{sleeper.pid}/stat", "rb") as f:
            stat = f.read().decode()
        started = stat[stat.rindex(")") + 2:].split()[19]
        (w / "exp" / ".vitviz-export-1-of-2.lock").write_text(json.dumps(
            {"pid": sleeper.pid, "host": socket.gethostname(), "started": started, "shard": [1, 2],
             "since": "2026-01-01 00:00:00", "token": "x"}))
        before = snapshot(w)
        refused(*cli(["merge", str(w / "exp")], capsys), "merge",
                f"another vitviz export (pid {sleeper.pid}) is writing to {w / 'exp'}")
        assert snapshot(w) == before
    finally:
        sleeper.kill()
        sleeper.wait()


def test_overwrite_replaces_an_earlier_merge(w, capsys):
    assert main(["merge", str(w / "exp")]) == 0
    first = (w / "exp" / "manifest.jsonl").read_text().splitlines()[1:]
    status, err, _ = cli(["merge", str(w / "exp"), "--overwrite"], capsys)
    assert status == 0 and err[-1] == f"vitviz merge: wrote {w / 'exp' / 'manifest.jsonl'}"
    assert (w / "exp" / "manifest.jsonl").read_text().splitlines()[1:] == first


# ------------------------------------------------------------------------------------------------ missing, doubled
def test_a_single_runs_manifest_beside_the_parts_is_doubled(w, capsys):
    assert main(["export", "--model", str(w / "m.safetensors"), str(w / "imgs"), "--out", str(w / "one"),
                 *EXPORT]) == 0
    shutil.copy(w / "one" / "manifest.jsonl", w / "exp" / "manifest.jsonl")
    before = snapshot(w)
    status, err, out = cli(["merge", str(w / "exp")], capsys)
    assert status == 1 and out == ""
    assert err[1:] == [f"vitviz merge: export: {w / 'exp' / 'manifest.jsonl'} holds 3 image record(s) of a run "
                       "without shards, which the parts do again: move it away (or delete the parts) before merging",
                       "vitviz merge: nothing written"]
    assert snapshot(w) == before


def test_a_part_without_its_plan_is_named(w, capsys):
    (w / "exp" / "manifest-2-of-2.plan.json").unlink()
    before = snapshot(w)
    status, err, _ = cli(["merge", str(w / "exp")], capsys)
    assert status == 1
    assert err[1] == ("vitviz merge: export: manifest-2-of-2.jsonl has no manifest-2-of-2.plan.json (written by an "
                      "older vitviz, or the plan was deleted): run shard 2/2 again (it skips the images done and "
                      "writes its plan)")
    assert snapshot(w) == before


# ------------------------------------------------------------------------------------------------ launchers' variables
ENV_CASES = [  # (id, command, variables, extra arguments, what the line must say)
    ("RANK not an integer", "export", {"RANK": "abc", "WORLD_SIZE": "2"}, [],
     "RANK='abc': not an integer (torchrun sets a whole number; give --shard K/N to choose the shard yourself)"),
    ("RANK = WORLD_SIZE", "stats", {"RANK": "2", "WORLD_SIZE": "2"}, [],
     "RANK=2: must be between 0 and WORLD_SIZE - 1 = 1"),
    ("WORLD_SIZE missing", "evaluate", {"RANK": "0"}, [], "WORLD_SIZE is not set, but the other variables of torchrun"),
    ("LOCAL_RANK not an integer", "export", {"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "gpu0"},
     ["--device", "cuda"], "LOCAL_RANK='gpu0': not an integer"),
    ("array id not an integer", "stats", {"SLURM_ARRAY_TASK_ID": "4a", "SLURM_ARRAY_TASK_COUNT": "4"}, [],
     "SLURM_ARRAY_TASK_ID='4a': not an integer"),
    ("array id below its minimum", "export",
     {"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "2"}, [],
     "SLURM_ARRAY_TASK_ID=0: not one of the 2 tasks of an array from SLURM_ARRAY_TASK_MIN=1 in steps of 1"),
    ("array with gaps", "evaluate",
     {"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_MIN": "1", "SLURM_ARRAY_TASK_COUNT": "3"}, [],
     "an array with gaps, such as --array=1,3,7"),
    ("array count missing", "stats", {"SLURM_ARRAY_TASK_ID": "1"}, [], "SLURM_ARRAY_TASK_COUNT is not set"),
    ("srun task beyond the tasks", "export", {"SLURM_PROCID": "3", "SLURM_NTASKS": "2"}, [],
     "SLURM_PROCID=3: must be between 0 and SLURM_NTASKS - 1 = 1"),
    ("srun tasks not an integer", "evaluate", {"SLURM_PROCID": "0", "SLURM_NTASKS": "two"}, [],
     "SLURM_NTASKS='two': not an integer"),
    ("evaluate shard without --csv", "evaluate", {"RANK": "0", "WORLD_SIZE": "2"}, ["--no-csv"],
     "--csv: shard 1/2 (from torchrun (RANK=0, WORLD_SIZE=2)) writes its tables beside the CSV file"),
    ("stats shard's part exists", "stats", {"SLURM_PROCID": "1", "SLURM_NTASKS": "2"}, [],
     "attention_stats-2-of-2.npz already exists (pass --overwrite to replace it)"),
]


@pytest.mark.parametrize("name,command,variables,extra,needle", ENV_CASES, ids=[c[0] for c in ENV_CASES])
def test_launcher_values_no_launcher_sets(w, capsys, monkeypatch, name, command, variables, extra, needle):
    for k, v in variables.items():
        monkeypatch.setenv(k, v)
    model, imgs = str(w / "m.safetensors"), str(w / "imgs")
    if command == "export":
        argv = ["export", "--model", model, imgs, "--out", str(w / "exp"), *EXPORT, *extra]
    elif command == "stats":
        argv = ["stats", "--model", model, imgs, "--out", str(w / "st"), "--quiet", *extra]
    else:
        csv = [] if "--no-csv" in extra else ["--csv", str(w / "ev" / "auc.csv")]
        argv = ["evaluate", model, imgs, *csv]
    before = snapshot(w)
    status, err, out = cli(argv, capsys)
    if command == "evaluate":  # evaluate prints nothing before its first image either
        assert out == ""
    refused(status, err, out, command, needle)
    assert snapshot(w) == before
    assert os.environ.get("RANK") == variables.get("RANK")  # (the test's own variables, undone after it)
