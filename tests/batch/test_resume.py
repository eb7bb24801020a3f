"""What a rerun of ``vitviz export`` finds in its folder: the lock (vitviz.batch.locking), the model's identity
(vitviz.batch.fingerprint), the manifest's lines and their repair (vitviz.batch.manifest). The command-line cases
(exit status, the one line) are in tests/corpus/test_batch_corpus.py; these are the parts alone, and two real
processes exporting into one folder."""

from __future__ import annotations

import copy
import json
import os
import signal
import socket
from pathlib import Path

import numpy as np
import pytest
import torch
from kill_points import stopped_when
from PIL import Image

import vitviz.batch.manifest as manifest
from vitviz.batch.fingerprint import model_sha256
from vitviz.batch.locking import ExportBusy, ExportLock
from vitviz.batch.manifest import ManifestError, drop_lines, read_folder, read_manifest, repair_tail
from vitviz.cli import main
from vitviz.model import save_checkpoint


# ----------------------------------------------------------------------------------------------- the model's identity
def test_the_model_is_identified_by_its_content(tiny_model, tmp_path):
    a = model_sha256(tiny_model)
    assert len(a) == 64 and a == model_sha256(copy.deepcopy(tiny_model))
    moved = copy.deepcopy(tiny_model)
    moved.spec = moved.spec.replace(source_path=str(tmp_path / "elsewhere.safetensors"))
    assert model_sha256(moved) == a  # where it was loaded from does not count
    other = copy.deepcopy(tiny_model)
    with torch.no_grad():
        other.head.bias[0] += 1e-3  # one number
    assert model_sha256(other) != a
    renamed = copy.deepcopy(tiny_model)
    renamed.spec = renamed.spec.replace(name="another name")  # the name is drawn on the figures
    assert model_sha256(renamed) != a
    assert model_sha256(copy.deepcopy(tiny_model).to(torch.bfloat16)) not in (a, None)  # bf16 tensors hash too


# ----------------------------------------------------------------------------------------------- manifest lines
def _rec(source: str, files=("a.npy",)) -> str:
    return json.dumps({"source": source, "status": "ok", "request": "r1", "files": list(files)})


def test_repair_tail(tmp_path):
    m = tmp_path / "manifest.jsonl"
    assert repair_tail(m) is None and not m.exists()  # nothing to repair
    m.write_text(_rec("x") + "\n" + _rec("y")[:20])
    assert repair_tail(m) == 2
    assert m.read_text() == _rec("x") + "\n"
    assert repair_tail(m) is None  # whole now
    m.write_text(_rec("x") + "\n" + _rec("y"))  # a whole line without its line break: kept
    assert repair_tail(m) is None and m.read_text() == _rec("x") + "\n" + _rec("y") + "\n"
    m.write_text(_rec("x")[:10])  # the only line, cut
    assert repair_tail(m) == 1 and m.read_bytes() == b""


def test_read_manifest_and_read_folder(tmp_path):
    run = json.dumps({"run": {"request": "r1", "settings": {"views": ["cls"]}, "time": 5.0}})
    m = tmp_path / "manifest.jsonl"
    m.write_text(run + "\n" + _rec("x", ["x.npy"]) + "\n\n" + _rec("y", ["y.npy"]) + "\n" + _rec("z")[:30])
    assert [r["source"] for r in read_manifest(m)] == ["x", "y"]  # the run line, the blank and the cut line out
    state = read_folder(tmp_path)
    assert state.cut == {m: 5} and not state.damaged and not state.legacy
    assert state.ours == {"x.npy", "y.npy"} and state.latest_run()[1]["request"] == "r1"
    other = tmp_path / "manifest-1-of-2.jsonl"
    other.write_text(json.dumps({"run": {"request": "r2", "settings": {}, "time": 9.0}}) + "\n")
    assert read_folder(tmp_path).latest_run() == (other, {"request": "r2", "settings": {}, "time": 9.0})
    (tmp_path / "manifest-old.jsonl").write_text("not ours\n")  # not a manifest name: not read
    m.write_text(_rec("x") + "\n[1]\n" + _rec("y") + "\n")
    with pytest.raises(ManifestError, match=r"manifest.jsonl line 2: not a line of vitviz export"):
        read_manifest(m)
    state = read_folder(tmp_path)
    assert state.damaged == [(m, 2, "not a line of vitviz export (an image's record has source, status, request "
                                    "and files)")]
    assert state.legacy == [m]  # records, no run line
    drop_lines(m, {2})
    assert m.read_text() == _rec("x") + "\n" + _rec("y") + "\n"


def test_a_failed_append_leaves_no_cut_line(tmp_path, monkeypatch):
    """A full disk part-way through a record: the part written is undone, the next record starts on a whole line."""
    m = tmp_path / "manifest.jsonl"
    a = manifest.Appender(m)
    a.write({"run": {"request": "r", "settings": {}}})
    real = os.write

    def half_then_full(fd, data):
        if len(data) > 8:
            return real(fd, bytes(data[:8]))
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(manifest.os, "write", half_then_full)
    with pytest.raises(OSError, match=rf"cannot write {m}: No space left on device"):
        a.write(json.loads(_rec("x")))
    monkeypatch.setattr(manifest.os, "write", real)
    a.write(json.loads(_rec("y")))
    a.close()
    assert [r["source"] for r in read_manifest(m)] == ["y"] and not read_folder(tmp_path).cut


# ----------------------------------------------------------------------------------------------- the lock
def test_lock_in_one_process(tmp_path):
    first = ExportLock(tmp_path, (1, 1)).acquire()
    info = json.loads((tmp_path / ".vitviz-export.lock").read_text())
    assert info["pid"] == os.getpid() and info["shard"] == [1, 1]
    with pytest.raises(ExportBusy, match=rf"another vitviz export \(pid {os.getpid()}\) is writing to {tmp_path}"):
        ExportLock(tmp_path, (1, 1)).acquire()  # two exports in one process are two owners too
    with pytest.raises(ExportBusy):
        ExportLock(tmp_path, (2, 3)).acquire()  # another split overlaps this one
    assert [p.name for p in tmp_path.iterdir()] == [".vitviz-export.lock"]  # the refused left nothing
    first.release()
    assert not list(tmp_path.iterdir())
    shards = [ExportLock(tmp_path, (k, 3)).acquire() for k in (1, 2, 3)]  # one job array, side by side
    for s in shards:
        s.release()
    # a lock left by this very process, not held any more (a fork, a reused pid): taken over
    (tmp_path / ".vitviz-export.lock").write_text(json.dumps({"pid": os.getpid(), "host": info["host"]}))
    notes = []
    ExportLock(tmp_path, (1, 1)).acquire(notes.append).release()
    assert len(notes) == 1 and "took over the lock of an export that is gone" in notes[0]


def test_a_reused_pid_does_not_hold_a_lock(tmp_path):
    """The lock records its owner's start time (Linux): a live process with that pid that started at another time is
    not the owner; without /proc a live pid is taken as the owner."""
    info = {"pid": os.getppid(), "host": socket.gethostname(), "started": "1", "since": "then"}
    (tmp_path / ".vitviz-export.lock").write_text(json.dumps(info))
    notes = []
    if Path(f"/proc/{os.getppid()}/stat").exists():
        ExportLock(tmp_path, (1, 1)).acquire(notes.append).release()
        assert notes == [f"took over the lock of an export that is gone (pid {os.getppid()}, since then)"]
    else:
        with pytest.raises(ExportBusy):
            ExportLock(tmp_path, (1, 1)).acquire(notes.append)


# ----------------------------------------------------------------------------------------------- two real exports
def test_two_exports_into_one_folder(tiny_model, tmp_path, capsys):
    """A real export is stopped (SIGSTOP) while it holds the folder; a second one stops at once, naming it; the first
    then finishes as if alone."""
    model = tmp_path / "m.safetensors"
    save_checkpoint(tiny_model, model)
    images = tmp_path / "imgs"
    images.mkdir()
    rng = np.random.default_rng(0)
    for i in range(12):
        Image.fromarray(rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)).save(images / f"i{i:02d}.png")
    out = tmp_path / "out"
    args = ["export", "--model", str(model), str(images), "--out", str(out), "--quiet", "--precision", "fp32",
            "--batch-size", "1", "--format", "npy"]
    lock = out / ".vitviz-export.lock"
    first = stopped_when(args, lock)  # stopped by itself at its first write holding the lock: no polling, no clock
    try:
        assert lock.exists() and first.poll() is None
        capsys.readouterr()
        assert main(args) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"vitviz export: error: another vitviz export (pid {first.pid}) is writing to {out} (lock "
                       f".vitviz-export.lock, since {json.loads(lock.read_text())['since']}); wait for it to "
                       "finish, or choose another --out"]
    finally:
        first.send_signal(signal.SIGCONT)
        _, stderr = first.communicate(timeout=300)
    assert first.returncode == 0, stderr
    assert "12 image(s) written" in stderr and not lock.exists()
    assert len(read_manifest(out / "manifest.jsonl")) == 12
    assert main(args) == 0  # and the folder resumes
    assert "0 image(s) to do, 12 already done" in capsys.readouterr().err
