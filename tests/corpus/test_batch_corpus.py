"""The corpus of bad inputs of the batch commands (``vitviz export``, ``stats``, ``evaluate``): their arguments,
where their results go, and the manifests and locks a rerun finds in an export's folder.

Every case runs the real command line (``vitviz.cli.main``, in this process: the tiny model of conftest's
``tiny_model`` written into tmp_path, three small images) and has an exact expectation:

* a refusal: exit status 2, exactly one stderr line ``vitviz COMMAND: error: ...`` that names the argument or the
  file and the cause, no other output (so the refusal came before any image was read or analysed: the commands log
  a line when they start working), and nothing written or changed under tmp_path;
* a repair or a resume: exit 0, the warning or note line named, and the folder's files equal those of a fresh run.

Unwritable folders: a folder without write permission; as root (who writes anyway) the temporary file that every
writer and the output check create first is refused in it, as a read-only mount would.
"""

from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
from bounded_runs import cli, snapshot
from PIL import Image

from vitviz.model import save_checkpoint

IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


# ---------------------------------------------------------------------------------------------------- the world
@dataclass
class World:
    root: Path
    model: Path  # the tiny model
    other: Path  # another model (other weights), same architecture
    images: Path  # a folder of three images
    out: Path  # an export's folder (not created)

    def export(self, *extra: str, model: Path | None = None, out: Path | None = None) -> list[str]:
        return ["export", "--model", str(model or self.model), str(self.images), "--out", str(out or self.out),
                "--quiet", "--format", "npy", "--views", "cls,rollout", "--precision", "fp32", *extra]


@pytest.fixture
def world(tmp_path, tiny_model) -> World:
    model = tmp_path / "m.safetensors"
    save_checkpoint(tiny_model, model)
    changed = copy.deepcopy(tiny_model)
    with torch.no_grad():
        changed.blocks[-1].attn.qkv.weight.mul_(-1.0)  # another model with the same architecture and name
    other = tmp_path / "other.safetensors"
    save_checkpoint(changed, other)
    images = tmp_path / "imgs"
    images.mkdir()
    rng = np.random.default_rng(3)
    for i in range(3):
        Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(images / f"i{i}.png")
    return World(tmp_path, model, other, images, tmp_path / "out")


@pytest.fixture
def unwritable(tmp_path, monkeypatch) -> Path:
    """A folder nobody may create files in (see the module's docstring)."""
    ro = tmp_path / "readonly"
    ro.mkdir()
    if IS_ROOT:
        real = tempfile.mkstemp

        def mkstemp(*a, dir=None, **k):
            if dir is not None and Path(dir).resolve() == ro.resolve():
                raise PermissionError(13, "Permission denied")
            return real(*a, dir=dir, **k)

        monkeypatch.setattr(tempfile, "mkstemp", mkstemp)
        yield ro
    else:
        ro.chmod(0o555)
        yield ro
        ro.chmod(0o755)






def outputs(out: Path) -> dict[str, bytes]:
    """The maps of an export's folder (the manifest, the lock and hidden files left out)."""
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.npy"))}


def refused(status: int, err: list[str], stdout: str, command: str, *needles: str) -> str:
    """Check a refusal (see the module's docstring) and return its line."""
    assert status == 2, (status, err)
    assert len(err) == 1, err
    line = err[0]
    assert line.startswith(f"vitviz {command}: error: "), line
    assert "Traceback" not in line
    for n in needles:
        assert n in line, (n, line)
    assert stdout == "", stdout
    return line


# ---------------------------------------------------------------------------------------------------- arguments
ARGUMENT_CASES = [  # (id, command, extra arguments, what the line must say: the argument and the cause)
    ("scale 0", "export", ["--scale", "0"], ["--scale 0:", "a scale factor must be 1..16"]),
    ("scale 17", "export", ["--scale", "17"], ["--scale 17:", "a scale factor must be 1..16"]),
    ("scale -2", "export", ["--scale", "-2"], ["--scale -2:", "scale must be 'print', 'native' or a factor"]),
    ("scale word", "export", ["--scale", "huge"], ["--scale huge:", "scale must be 'print', 'native' or a factor"]),
    ("shard -1/2", "export", ["--shard", "-1/2"], ["--shard -1/2: K must be between 1 and N"]),
    ("shard=-1/2", "export", ["--shard=-1/2"], ["--shard -1/2: K must be between 1 and N"]),
    ("shard 0/2", "export", ["--shard", "0/2"], ["--shard 0/2: K must be between 1 and N"]),
    ("shard 3/2", "export", ["--shard", "3/2"], ["--shard 3/2: K must be between 1 and N"]),
    ("shard 1/0", "export", ["--shard", "1/0"], ["--shard 1/0: K must be between 1 and N"]),
    ("shard 1/-2", "export", ["--shard", "1/-2"], ["--shard 1/-2: K must be between 1 and N"]),
    ("shard word", "export", ["--shard", "half"], ["--shard half: expected K/N"]),
    ("shard 1/2/3", "export", ["--shard", "1/2/3"], ["--shard 1/2/3: expected K/N"]),
    ("query -1,2", "export", ["--query", "-1,2"], ["--query -1,2: expected ROW,COL"]),
    ("layers -9", "export", ["--layers", "-9"], ["--layers -9: the model has 3 layers"]),
    ("layers -1,-9", "export", ["--layers", "-1,-9"], ["--layers -9: the model has 3 layers"]),
    ("batch size -1", "export", ["--batch-size", "-1"], ["--batch-size -1: must be at least 1"]),
    ("fps 0", "export", ["--fps", "0"], ["--fps 0: must be more than 0"]),
    ("fps -2", "export", ["--fps", "-2"], ["--fps -2: must be more than 0"]),
    ("workers 0", "export", ["--workers", "0"], ["--workers 0: must be at least 1"]),
    ("workers -3", "export", ["--workers=-3"], ["--workers -3: must be at least 1"]),
    ("workers word", "export", ["--workers", "many"], ["--workers", "invalid int value: 'many'"]),
    ("backward word", "export", ["--backward", "never"], ["--backward", "invalid choice: 'never'"]),
    ("stats workers 0", "stats", ["--workers", "0"], ["--workers 0: must be at least 1"]),
    ("evaluate backward word", "evaluate", ["--backward", "sometimes"], ["--backward", "invalid choice"]),
    ("stats batch size 0", "stats", ["--batch-size", "0"], ["--batch-size 0: must be at least 1"]),
    ("evaluate steps -1", "evaluate", ["--steps", "-1"], ["--steps -1: must be at least 1"]),
]


@pytest.mark.parametrize("name,command,extra,needles", ARGUMENT_CASES, ids=[c[0] for c in ARGUMENT_CASES])
def test_bad_argument(world, capsys, name, command, extra, needles):
    before = snapshot(world.root)
    if command == "export":
        argv = world.export(*extra)
    elif command == "stats":
        argv = ["stats", "--model", str(world.model), str(world.images), "--out", str(world.out), "--quiet", *extra]
    else:
        argv = ["evaluate", str(world.model), str(world.images), "--csv", str(world.root / "auc.csv"), *extra]
    refused(*cli(argv, capsys), command, *needles)
    assert snapshot(world.root) == before


# ---------------------------------------------------------------------------------------------- output targets
def _target(world: World, kind: str, ro: Path | None) -> tuple[Path, list[str]]:
    """An output target of ``kind`` and what the refusal must say about it."""
    a_file = world.root / "a_file"
    a_file.write_text("mine")
    if kind == "a file":
        return a_file, [f"cannot write {a_file}: a file of that name exists (the output must be a folder)"]
    if kind == "below a file":
        return a_file / "sub", [f"cannot write {a_file / 'sub'}: {a_file} is a file, not a folder"]
    if kind == "unwritable folder":
        return ro, [f"cannot write {ro}: the output folder is not writable", "ermission denied"]
    if kind == "missing, below an unwritable folder":
        return ro / "new", [f"cannot write {ro / 'new'}: cannot create the output folder: {ro} is not writable",
                            "ermission denied"]
    raise AssertionError(kind)


TARGET_KINDS = ["a file", "below a file", "unwritable folder", "missing, below an unwritable folder"]


@pytest.mark.parametrize("kind", TARGET_KINDS)
@pytest.mark.parametrize("command", ["export", "stats"])
def test_output_folder_is_checked_before_any_work(world, capsys, request, command, kind):
    ro = request.getfixturevalue("unwritable") if "unwritable" in kind else None
    target, needles = _target(world, kind, ro)
    before = snapshot(world.root)
    if command == "export":
        argv = world.export(out=target)
    else:
        argv = ["stats", "--model", str(world.model), str(world.images), "--out", str(target), "--quiet"]
    refused(*cli(argv, capsys), command, *needles)
    assert snapshot(world.root) == before


CSV_CASES = [  # (id, where the CSV goes, what the line must say)
    ("unwritable folder", lambda w, ro: ro / "auc.csv", lambda w, ro: [f"cannot write {ro / 'auc.csv'}: the output "
                                                                       "folder is not writable", "ermission denied"]),
    ("missing folder", lambda w, ro: w.root / "nowhere" / "auc.csv",
     lambda w, ro: [f"cannot write {w.root / 'nowhere' / 'auc.csv'}: folder {w.root / 'nowhere'} does not exist"]),
    ("a folder", lambda w, ro: w.images, lambda w, ro: [f"cannot write {w.images}: a folder of that name exists"]),
    ("below a file", lambda w, ro: w.model / "auc.csv",
     lambda w, ro: [f"cannot write {w.model / 'auc.csv'}: {w.model} is a file, not a folder"]),
    ("an existing file", lambda w, ro: w.model,
     lambda w, ro: [f"{w.model} already exists (pass --overwrite to replace it)"]),
]


@pytest.mark.parametrize("name,where,needles", CSV_CASES, ids=[c[0] for c in CSV_CASES])
def test_evaluate_csv_target_is_checked_before_any_work(world, capsys, request, name, where, needles):
    ro = request.getfixturevalue("unwritable") if "unwritable" in name else None
    before = snapshot(world.root)
    argv = ["evaluate", str(world.model), str(world.images), "--steps", "2", "--seeds", "1", "--csv",
            str(where(world, ro))]
    refused(*cli(argv, capsys), "evaluate", *needles(world, ro))
    assert snapshot(world.root) == before


def test_stats_existing_outputs_are_refused_before_any_work(world, capsys):
    argv = ["stats", "--model", str(world.model), str(world.images), "--out", str(world.out), "--quiet"]
    assert cli(argv, capsys)[0] == 0
    before = snapshot(world.root)
    refused(*cli(argv, capsys), "stats", f"{world.out / 'attention_stats.csv'} already exists", "--overwrite")
    assert snapshot(world.root) == before


# ---------------------------------------------------------------------------------------------------- manifests
def _fresh(world: World, capsys, model: Path | None = None, *extra: str) -> dict[str, bytes]:
    """The maps of a fresh export into a folder of their own."""
    fresh = world.root / f"fresh-{len(list(world.root.glob('fresh-*')))}"
    status, err, _ = cli(world.export(*extra, model=model, out=fresh), capsys)
    assert status == 0, err
    return outputs(fresh)


def _manifest_lines(out: Path) -> list[str]:
    return (out / "manifest.jsonl").read_text().splitlines()


@pytest.mark.parametrize("journal", [True, False], ids=["journal_left", "journal_gone"])
@pytest.mark.parametrize("keep", [20, 57, 0.5, -3], ids=["in_files", "early", "middle", "late"])
def test_a_last_line_cut_by_a_crash_is_set_aside_and_its_image_redone(world, capsys, journal, keep):
    """A crash while the last record was written: its files are complete (written atomically, named by the journal
    when the crash left it, and by the cut line itself: a record starts with its output name and files), its line is
    cut short. The rerun moves the cut line aside (kept, named in the warning; never appended onto), redoes that
    image, records it, and exits 0; a second rerun has nothing to do."""
    assert cli(world.export(), capsys)[0] == 0
    m = world.out / "manifest.jsonl"
    lines = m.read_bytes().split(b"\n")[:-1]
    last = json.loads(lines[-1])
    assert list(last)[:2] == ["output", "files"]
    cut = lines[-1][:int(len(lines[-1]) * keep) if isinstance(keep, float) else keep]
    m.write_bytes(b"\n".join(lines[:-1]) + b"\n" + cut)  # cut in the middle of the last record
    if journal:
        (world.out / ".manifest.jsonl.pending").write_text("".join(json.dumps({"files": [f]}) + "\n"
                                                                   for f in last["files"]))
    status, err, _ = cli(world.export(), capsys)
    assert status == 0, err
    assert err[0] == (f"vitviz export: warning: {m} line {len(lines)} was cut short (a run stopped while writing it): "
                      f"moved to manifest.jsonl.cut-line-{len(lines)}, and its image is done again")
    assert (world.out / f"manifest.jsonl.cut-line-{len(lines)}").read_bytes() == cut  # kept as it was
    assert "1 image(s) to do, 2 already done" in err[1]
    records = [json.loads(x) for x in _manifest_lines(world.out)]  # every line whole: nothing appended onto it
    assert sorted(r["source"] for r in records if "source" in r) == sorted(str(p) for p in world.images.iterdir())
    assert all(r["status"] == "ok" for r in records if "source" in r)
    maps = outputs(world.out)
    assert maps == _fresh(world, capsys)
    assert not (world.out / ".manifest.jsonl.pending").exists()
    status, err, _ = cli(world.export(), capsys)
    assert status == 0 and "0 image(s) to do, 3 already done" in err[0], err


def test_a_last_line_without_its_line_break_is_kept(world, capsys):
    assert cli(world.export(), capsys)[0] == 0
    m = world.out / "manifest.jsonl"
    m.write_bytes(m.read_bytes().rstrip(b"\n"))  # a whole record, its line break lost (an editor)
    status, err, _ = cli(world.export(), capsys)
    assert status == 0 and "0 image(s) to do, 3 already done" in err[0], err
    assert all(json.loads(x) for x in _manifest_lines(world.out))


def test_a_model_replaced_at_the_same_path_stops_the_resume(world, capsys):
    assert cli(world.export(), capsys)[0] == 0
    world.model.write_bytes(world.other.read_bytes())  # the checkpoint replaced, same path
    before = snapshot(world.root)
    line = refused(*cli(world.export(), capsys), "export", f"{world.out} holds maps made with other settings (the run "
                   "of ", "in manifest.jsonl): the model changed (sha256 ", f"... from file:{world.model} before, ",
                   f"... from file:{world.model} now); pass --overwrite to redo every image with these settings, or "
                   "choose another --out")
    assert "--cmap" not in line and "--views" not in line  # only what changed
    assert snapshot(world.root) == before
    # --overwrite redoes every image: the folder then equals a fresh run of the new model
    status, err, _ = cli(world.export("--overwrite"), capsys)
    assert status == 0, err
    assert outputs(world.out) == _fresh(world, capsys, world.other)
    assert cli(world.export(), capsys)[0] == 0  # and resumes from there


def test_the_same_weights_moved_elsewhere_resume(world, capsys):
    assert cli(world.export(), capsys)[0] == 0
    before = outputs(world.out)
    moved = world.root / "moved" / "renamed.safetensors"
    moved.parent.mkdir()
    world.model.rename(moved)
    status, err, _ = cli(world.export(model=moved), capsys)
    assert status == 0 and "0 image(s) to do, 3 already done" in err[0], err
    assert outputs(world.out) == before


@pytest.mark.parametrize("extra,needle", [
    (["--cmap", "viridis"], "--cmap inferno before, viridis now"),
    (["--views", "relevance"], "--views cls,rollout before, cls,rollout,relevance now"),  # a view added
    (["--no-colorbar", "--format", "both"], "--format npy before, both now; colorbar on before, off now"),
    (["--layers", "0"], "--layers last before, 0 now"),
], ids=["cmap", "views", "format and colour bar", "layers"])
def test_other_options_stop_the_resume_naming_what_changed(world, capsys, extra, needle):
    assert cli(world.export(), capsys)[0] == 0
    before = snapshot(world.root)
    refused(*cli(world.export(*extra), capsys), "export",
            f"{world.out} holds maps made with other settings (the run of ", f"in manifest.jsonl): {needle}; pass "
            "--overwrite")
    assert snapshot(world.root) == before


def test_an_old_manifest_without_the_model_identity_stops_the_resume(world, capsys):
    assert cli(world.export(), capsys)[0] == 0
    m = world.out / "manifest.jsonl"
    m.write_text("".join(x + "\n" for x in _manifest_lines(world.out) if not x.startswith('{"run"')))
    before = snapshot(world.root)
    refused(*cli(world.export(), capsys), "export", f"{m} was written by an older vitviz export that did not record "
            "which model made the maps", "pass --overwrite")
    assert snapshot(world.root) == before


DAMAGE = [  # (id, what replaces line 2 of the manifest, the cause named)
    ("not JSON", b'{"source": "x", "status": "ok",, }', "not JSON (column 32: expecting property name"),
    ("a list", b"[1, 2, 3]", "not a line of vitviz export"),
    ("a record without files", b'{"source": "x", "status": "ok", "request": "r"}', "not a line of vitviz export"),
    ("a file outside the folder", b'{"source": "x", "status": "ok", "request": "r", "files": ["../../etc/x.npy"]}',
     "names a file outside the output folder (../../etc/x.npy)"),
    ("not UTF-8", b"\xff\xfe\x00garbage", "not UTF-8 text"),
]


@pytest.mark.parametrize("name,line,cause", DAMAGE, ids=[d[0] for d in DAMAGE])
def test_a_line_damaged_by_hand_is_named(world, capsys, name, line, cause):
    assert cli(world.export(), capsys)[0] == 0
    m = world.out / "manifest.jsonl"
    lines = m.read_bytes().split(b"\n")
    lines[1] = line
    m.write_bytes(b"\n".join(lines))
    before = snapshot(world.root)
    refused(*cli(world.export(), capsys), "export", f"{m} line 2: {cause}", "changed by hand",
            "repair or delete that line, pass --overwrite")
    assert snapshot(world.root) == before


def test_a_damaged_line_is_removed_by_overwrite_and_the_next_resume_goes_on(world, capsys):
    assert cli(world.export(), capsys)[0] == 0
    m = world.out / "manifest.jsonl"
    lines = m.read_bytes().split(b"\n")
    lines[2] = b"garbage"
    m.write_bytes(b"\n".join(lines))
    status, err, _ = cli(world.export("--overwrite"), capsys)
    assert status == 0, err
    assert err[0].startswith(f"vitviz export: warning: {m} line 3: not JSON") and err[0].endswith(
        "removed (--overwrite redoes every image)")
    status, err, _ = cli(world.export(), capsys)
    assert status == 0 and "0 image(s) to do, 3 already done" in err[0], err
    assert outputs(world.out) == _fresh(world, capsys)


def test_a_damaged_line_of_another_shard_is_skipped_with_a_warning(world, capsys):
    for k in (1, 2):
        assert cli(world.export("--shard", f"{k}/2"), capsys)[0] == 0
    manifests = {k: world.out / f"manifest-{k}-of-2.jsonl" for k in (1, 2)}
    damaged = next(k for k in (1, 2) if len(manifests[k].read_text().splitlines()) >= 2)  # a run line and a record
    lines = manifests[damaged].read_bytes().split(b"\n")
    lines[1] = b"{oops"
    manifests[damaged].write_bytes(b"\n".join(lines))
    status, err, _ = cli(world.export("--shard", f"{3 - damaged}/2"), capsys)
    assert status == 0, err
    assert err[0].startswith(f"vitviz export: warning: {manifests[damaged]} line 2: not JSON (column 2: ")
    assert err[0].endswith(": skipped") and "0 image(s) to do" in err[1]


def test_a_folder_named_like_the_manifest(world, capsys):
    (world.out / "manifest.jsonl").mkdir(parents=True)
    before = snapshot(world.root)
    refused(*cli(world.export(), capsys), "export", f"{world.out / 'manifest.jsonl'}: a folder of that name exists")
    assert snapshot(world.root) == before


# ---------------------------------------------------------------------------------------------------- two exports
@pytest.fixture
def live_pid():
    """The pid of a process that runs for the test (the owner of a lock written by the test)."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    yield p.pid
    p.kill()
    p.wait(30)


def _lock(out: Path, pid: int, *, host: str | None = None, shard: tuple[int, int] = (1, 1)) -> Path:
    out.mkdir(exist_ok=True)
    name = ".vitviz-export.lock" if shard[1] == 1 else f".vitviz-export-{shard[0]}-of-{shard[1]}.lock"
    path = out / name
    path.write_text(json.dumps({"pid": pid, "host": host or socket.gethostname(), "shard": list(shard),
                                "since": "2024-05-01 10:00:00", "token": "t"}))
    return path


def test_a_second_export_into_the_folder_stops_naming_the_first(world, capsys, live_pid):
    lock = _lock(world.out, live_pid)
    before = snapshot(world.root)
    refused(*cli(world.export(), capsys), "export", f"another vitviz export (pid {live_pid}) is writing to "
            f"{world.out} (lock .vitviz-export.lock, since 2024-05-01 10:00:00); wait for it to finish, or choose "
            "another --out")
    assert snapshot(world.root) == before and lock.exists()


def test_a_lock_of_a_process_that_is_gone_is_taken_over(world, capsys):
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait(30)
    _lock(world.out, p.pid)
    status, err, _ = cli(world.export(), capsys)
    assert status == 0, err
    assert err[0] == (f"vitviz export: note: took over the lock of an export that is gone (pid {p.pid}, since "
                      "2024-05-01 10:00:00)")
    assert not list(world.out.glob(".vitviz-export*.lock"))  # released at the end
    assert outputs(world.out) == _fresh(world, capsys)


def test_a_lock_from_another_host_says_how_to_remove_it(world, capsys):
    lock = _lock(world.out, 4242, host="node17")
    before = snapshot(world.root)
    refused(*cli(world.export(), capsys), "export", f"another vitviz export (pid 4242 on node17) is writing to "
            f"{world.out}", f"if it no longer runs on node17, delete {lock}")
    assert snapshot(world.root) == before


def test_a_lock_that_is_not_one_of_ours(world, capsys):
    world.out.mkdir()
    lock = world.out / ".vitviz-export.lock"
    lock.write_bytes(b"\x00garbage")
    before = snapshot(world.root)
    refused(*cli(world.export(), capsys), "export", f"{world.out} is locked by {lock}, which is not a lock vitviz "
            "export writes; if no vitviz export is writing to", "delete it")
    assert snapshot(world.root) == before


def test_shards_of_one_split_run_side_by_side_but_not_another_split(world, capsys, live_pid):
    _lock(world.out, live_pid, shard=(1, 2))  # shard 1 of 2 is running
    status, err, _ = cli(world.export("--shard", "2/2"), capsys)
    assert status == 0, err
    before = snapshot(world.root)
    refused(*cli(world.export(), capsys), "export", f"another vitviz export (pid {live_pid}) is writing to "
            f"{world.out} (lock .vitviz-export-1-of-2.lock")
    refused(*cli(world.export("--shard", "1/3"), capsys), "export", f"(pid {live_pid}) is writing to {world.out}")
    assert snapshot(world.root) == before
