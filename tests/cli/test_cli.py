"""The ``vitviz`` command: --version, info, predict, models, and the lazy GUI hand-off."""

import sys
import types

import numpy as np
import pytest
import torch
from PIL import Image

from vitviz import __version__
from vitviz.cli import main


def test_version(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert __version__ in capsys.readouterr().out


def test_info_prints_format_architecture_params(tiny_ckpt, capsys):
    m, path = tiny_ckpt
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "native" in out and "width 64" in out and "depth 2" in out and "4 heads" in out
    assert f"{m.num_params():,}" in out
    assert "32x32" in out and "classes:       3" in out
    assert "mean (0.5, 0.5, 0.5)" in out


def test_info_errors_are_one_clean_line(tmp_path, capsys):
    bad = tmp_path / "notes.txt"
    bad.write_text("hello, this is not a checkpoint\n")
    assert main(["info", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert str(bad) in err and "not a checkpoint" in err
    assert len(err.strip().splitlines()) == 1
    assert main(["info", str(tmp_path / "missing.pth")]) == 2
    assert "no such file" in capsys.readouterr().err


def test_predict_prints_topk_with_labels(tiny_ckpt, tmp_path, capsys):
    m, path = tiny_ckpt
    img = tmp_path / "x.png"
    rng = np.random.default_rng(0)
    Image.fromarray(rng.integers(0, 255, (40, 50, 3), dtype=np.uint8)).save(img)
    assert main(["predict", str(path), str(img), "--top", "2", "--precision", "fp32"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == str(img) and len(out) == 3
    # independent: the same preprocessing and forward by hand
    x = m.spec.preprocess(Image.open(img).convert("RGB"))[None]
    with torch.no_grad():
        p = m(x)[0].softmax(-1)
    best = int(p.argmax())
    assert out[1].split()[0] == str(best) and out[1].split()[2] == m.spec.labels[best]
    assert abs(float(out[1].split()[1]) - float(p[best])) < 1e-3


def test_predict_bad_image(tiny_ckpt, tmp_path, capsys):
    _, path = tiny_ckpt
    bad = tmp_path / "broken.png"
    bad.write_bytes(b"\x89PNG not really")
    assert main(["predict", str(path), str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "Traceback" not in err


def test_gui_handoff(monkeypatch):
    calls = {}

    def run_gui(images, model=None, device=None, precision=None):
        calls.update(images=images, model=model, device=device, precision=precision)
        return 7

    fake = types.ModuleType("vitviz.gui.app")
    fake.run_gui = run_gui
    monkeypatch.setitem(sys.modules, "vitviz.gui.app", fake)
    assert main(["a.png", "b.jpg", "--model", "vit_b_16", "--device", "cpu"]) == 7
    assert calls == {"images": ["a.png", "b.jpg"], "model": "vit_b_16", "device": "cpu", "precision": None}
    assert main(["a.png", "--precision", "fp32"]) == 7  # (None: the window's remembered choice)
    assert calls == {"images": ["a.png"], "model": None, "device": None, "precision": "fp32"}


def test_gui_missing_is_a_clear_message(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "vitviz.gui.app", None)  # import raises ImportError
    assert main([]) == 1
    assert "GUI is not available" in capsys.readouterr().err


def test_models_lists_pretrained(capsys, monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    assert main(["models"]) == 0
    out = capsys.readouterr().out
    for name in ("vit_b_16", "vit_b_32", "vit_l_16", "vit_l_32", "vit_h_14"):
        assert name in out
    assert "not cached" in out and str(tmp_path) in out


def test_info_on_pretrained_name_does_not_download(capsys, monkeypatch, tmp_path):
    import importlib

    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    mod = importlib.import_module("vitviz.model.sources.torch_hub")

    def no_network(*a, **k):
        raise AssertionError("info must not download")

    monkeypatch.setattr(mod, "_urlopen", no_network)
    monkeypatch.chdir(tmp_path)
    assert main(["info", "vit_b_16"]) == 0
    out = capsys.readouterr().out
    assert "not downloaded yet" in out and "vit_b_16-c867db91.pth" in out and "86,567,656" in out


def test_predict_offline_pretrained_is_one_clear_error(capsys, monkeypatch, tmp_path):
    import importlib
    import urllib.error

    monkeypatch.setenv("TORCH_HOME", str(tmp_path))
    mod = importlib.import_module("vitviz.model.sources.torch_hub")

    def offline(*a, **k):
        raise urllib.error.URLError("no network")

    monkeypatch.setattr(mod, "_urlopen", offline)
    monkeypatch.chdir(tmp_path)
    assert main(["predict", "vit_b_16", "x.png"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "not cached" in err and "vitviz --model" in err


def test_gui_with_an_unknown_model_name_is_one_line_and_exit_2(tmp_path):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "vitviz", "--model", str(tmp_path / "nope.safetensors")],
                       capture_output=True, text=True, timeout=120,
                       env={**__import__("os").environ, "QT_QPA_PLATFORM": "offscreen",
                            "VITVIZ_SETTINGS": str(tmp_path / "s.ini")})
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "nope.safetensors" in lines[0] and "Traceback" not in r.stderr


@pytest.mark.parametrize("argv", [["--version"], ["models"]])
def test_version_and_models_do_not_import_torch_or_qt(argv, tmp_path):
    import subprocess

    code = ("import sys\nfrom vitviz.cli import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
            "heavy = sorted(m for m in ('torch', 'torchvision', 'PySide6', 'numpy', 'PIL') if m in sys.modules)\n"
            "print('HEAVY', heavy, file=sys.stderr)\n")
    r = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, timeout=60,
                       env={**__import__("os").environ, "TORCH_HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr
    assert "HEAVY []" in r.stderr, r.stderr


# ---------------------------------------------------------------------------------------------- errors: one line each
def _one_error_line(err: str, command: str | None, *needles: str) -> str:
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    prefix = f"vitviz {command}: error: " if command else "vitviz: error: "
    assert lines[0].startswith(prefix), lines[0]
    for n in needles:
        assert n in lines[0], (n, lines[0])
    return lines[0]


def _image(path, seed=0):
    Image.fromarray(np.random.default_rng(seed).integers(0, 255, (40, 50, 3), dtype=np.uint8)).save(path)
    return path


def test_predict_reports_each_bad_image_on_its_own_line_and_goes_on(tiny_ckpt, tmp_path, capsys):
    _, ckpt = tiny_ckpt
    good, other = _image(tmp_path / "good.png"), _image(tmp_path / "other.jpg", 1)
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"\x89PNG\r\n\x1a\n and then nothing")
    missing = tmp_path / "missing.png"
    assert main(["predict", str(ckpt), str(good), str(bad), str(missing), str(other), "--top", "1"]) == 2
    out, err = capsys.readouterr()
    assert [line for line in out.splitlines() if not line.startswith(" ")] == [str(good), str(other)]
    head, *lines = err.strip().splitlines()  # the first line: what runs where (tests/cli/test_run_flags.py)
    assert head.startswith("vitviz predict: tiny on cpu, auto: ")
    assert len(lines) == 2 and "Traceback" not in err, err
    assert lines[0].startswith(f"vitviz predict: error: {bad}: ") and "not an image file" in lines[0]
    assert lines[1].startswith(f"vitviz predict: error: {missing}: ") and "does not exist" in lines[1]
    assert main(["predict", str(ckpt), str(good), str(other)]) == 0  # all good: status 0
    assert capsys.readouterr().err.splitlines() == [head]


def test_info_takes_several_checkpoints_and_reports_each_bad_one(tiny_ckpt, tmp_path, capsys):
    _, ckpt = tiny_ckpt
    notes = tmp_path / "notes.txt"
    notes.write_text("not a checkpoint")
    assert main(["info", str(ckpt), str(notes), str(tmp_path / "nope.pth"), str(ckpt)]) == 2
    out, err = capsys.readouterr()
    assert out.count("format:        native") == 2 and "\n\nname:" in out
    lines = err.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith(f"vitviz info: error: {notes}: not a checkpoint"), err
    assert lines[1].startswith(f"vitviz info: error: {tmp_path / 'nope.pth'}: ")
    assert main(["info", str(ckpt), str(ckpt)]) == 0


@pytest.mark.parametrize("where", ["after", "before"])
def test_debug_prints_the_traceback_before_the_line(tmp_path, capsys, where):
    notes = tmp_path / "notes.txt"
    notes.write_text("not a checkpoint")
    argv = ["info", str(notes), "--debug"] if where == "after" else ["--debug", "info", str(notes)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "CheckpointError" in err
    assert err.strip().splitlines()[-1].startswith(f"vitviz info: error: {notes}: not a checkpoint")
    assert main(["info", str(notes)]) == 2  # without --debug: the line alone
    _one_error_line(capsys.readouterr().err, "info", str(notes))


def test_debug_with_predict_and_the_gui_launcher(tiny_ckpt, tmp_path, capsys, monkeypatch):
    _, ckpt = tiny_ckpt
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"GIF89a")
    assert main(["predict", str(ckpt), str(bad), "--debug"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "ImageError" in err and err.strip().splitlines()[-1].startswith(
        f"vitviz predict: error: {bad}: ")
    _fake_gui(monkeypatch)
    assert main(["--model", "no_such_model", "--debug"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and err.strip().splitlines()[-1].startswith("vitviz: error: no_such_model: ")


def _fake_gui(monkeypatch):
    """A vitviz.gui.app whose run_gui parses --model exactly as the real one does before any window opens."""
    def run_gui(images, model=None, device=None, precision=None):
        from vitviz.model.sources.refs import parse_model_ref

        if model is not None:
            parse_model_ref(model)
        return 0

    fake = types.ModuleType("vitviz.gui.app")
    fake.run_gui = run_gui
    monkeypatch.setitem(sys.modules, "vitviz.gui.app", fake)


@pytest.mark.parametrize("exc, needles", [
    (KeyError("spec"), ("unexpected KeyError", "bug", "--debug")),
    (TypeError("unsupported operand"), ("unexpected TypeError", "--debug")),
    (MemoryError(), ("not enough memory",)),
    (RuntimeError("first line\nsecond line\n  third"), ("first line second line third",)),
])
def test_unexpected_errors_are_one_line_too(tiny_ckpt, capsys, monkeypatch, exc, needles):
    """A bug, an exhausted memory or a multi-line library message: still one line naming the file, exit 2."""
    import importlib

    _, ckpt = tiny_ckpt
    mod = importlib.import_module("vitviz.model.sources.refs")

    def broken(*a, **k):
        raise exc

    monkeypatch.setattr(mod, "load_model", broken)
    assert main(["info", str(ckpt)]) == 2
    _one_error_line(capsys.readouterr().err, "info", str(ckpt), *needles)
    assert main(["predict", str(ckpt), "x.png"]) == 2  # the model, before any image
    _one_error_line(capsys.readouterr().err, "predict", *needles)


def test_models_errors_are_one_line(capsys, monkeypatch):
    import vitviz.cli.models_command as models_command

    def unreadable():
        raise PermissionError(13, "Permission denied", "/root/.cache/torch/hub")

    monkeypatch.setattr(models_command, "pretrained_listing", unreadable)
    assert main(["models"]) == 2
    _one_error_line(capsys.readouterr().err, "models", "Permission denied", "/root/.cache/torch/hub")


@pytest.mark.parametrize("argv, command, needles", [
    (["predict", "{ckpt}", "x.png", "--top", "0"], "predict", ("--top 0",)),
    (["predict", "no_such_model", "x.png"], "predict",
     ("error: no_such_model: no such file, and not a known model name ('vitviz models' lists the names)",)),
    (["predict", "{ckpt}", "{tmp}/missing.png"], "predict", ("missing.png", "does not exist")),
    (["predict", "{tmp}/notes.txt", "x.png"], "predict", ("notes.txt", "not a checkpoint")),
    (["predict", "{ckpt}", "x.png", "--num-classes", "0"], "predict", ("no classification head",)),
    (["info", "random:no_such_architecture"], "info", ("no_such_architecture",)),
    (["info", "{tmp}"], "info", ("holds no model.safetensors",)),
    (["info", "{ckpt}", "--num-heads", "3"], "info", ("num_heads", "3")),
    (["--model", "no_such_model"], None,
     ("error: no_such_model: no such file, and not a known model name ('vitviz models' lists the names)",)),
    (["--model", "dino-s9"], None, ("error: dino-s9: no such file, and not a known model name; did you mean dino-s8? "
                                    "('vitviz models' lists the names)",)),
    (["--model", "{tmp}/nope.safetensors", "a.png"], None, ("nope.safetensors",)),
])
def test_every_sub_command_fails_on_one_line_with_status_2(tiny_ckpt, tmp_path, capsys, monkeypatch, argv, command,
                                                           needles):
    _, ckpt = tiny_ckpt
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    _fake_gui(monkeypatch)
    argv = [a.format(ckpt=ckpt, tmp=tmp_path) for a in argv]
    assert main(argv) == 2
    _one_error_line(capsys.readouterr().err, command, *needles)


@pytest.mark.parametrize("argv, prog", [
    (["predict"], "vitviz predict"), (["info"], "vitviz info"), (["predict", "m", "x.png", "--top", "many"],
                                                                 "vitviz predict"),
    (["models", "extra"], "vitviz"), (["--no-such-option"], "vitviz"), (["info", "m", "--preprocess", "zoom"],
                                                                        "vitviz info"),
])
def test_usage_errors_are_one_line_with_status_2(capsys, monkeypatch, argv, prog):
    _fake_gui(monkeypatch)
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    line = _one_error_line(capsys.readouterr().err, prog.removeprefix("vitviz").strip() or None)
    assert line.endswith(f"(see '{prog} --help')"), line


def test_a_file_name_with_a_line_break_stays_on_one_line(tiny_ckpt, tmp_path, capsys):
    _, ckpt = tiny_ckpt
    bad = tmp_path / "two\nlines.png"
    bad.write_bytes(b"not an image")
    assert main(["predict", str(ckpt), str(bad)]) == 2
    _one_error_line(capsys.readouterr().err, "predict", "two lines.png", "not an image file")


@pytest.mark.parametrize("ref", ["random:nope", "pretrained:vit_b_17"])
def test_unknown_named_model_is_one_line_exit_2_before_any_window(ref):
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "vitviz", "--model", ref], capture_output=True, text=True,
                         timeout=120, env={**__import__("os").environ, "QT_QPA_PLATFORM": "offscreen"})
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and ref in lines[0] and "unknown" in lines[0] and "Traceback" not in out.stderr


def test_help_lists_every_sub_command_from_one_table(capsys):
    from vitviz.cli.commands import COMMANDS, summary
    from vitviz.cli.dispatch import SUBCOMMANDS, sub_parser

    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0
    text = capsys.readouterr().out
    listed = text[text.index("sub-commands"):]
    assert SUBCOMMANDS == tuple(COMMANDS) == ("info", "predict", "models", "evaluate", "export", "stats", "merge",
                                                   "lens", "ablate", "patch")
    for name, (arguments, _) in COMMANDS.items():
        assert f"vitviz {name} {arguments}".rstrip() in listed
        assert summary(name)[:30] in " ".join(listed.split())
        # each sub-command's own parser carries the same one-line help
        assert summary(name)[:30] in " ".join(sub_parser(name).format_help().split())


def _photos(folder, n=3):
    folder.mkdir()
    rng = np.random.default_rng(2)
    for i in range(n):
        Image.fromarray((rng.random((40, 44, 3)) * 255).astype(np.uint8)).save(folder / f"p{i}.png")
    return folder


def test_backward_and_workers_flags_change_memory_and_threads_not_the_maps(tiny_ckpt, tmp_path, capsys):
    """--backward keep / recompute (the streamed gradient pass's memory mode) and --workers (reading threads) give
    the same files; the first line says how the backward runs."""
    _, path = tiny_ckpt
    photos = _photos(tmp_path / "in")
    first, files = {}, {}
    for mode, workers in (("keep", "1"), ("recompute", "3"), ("auto", "2")):
        out = tmp_path / mode
        capsys.readouterr()
        assert main(["export", "--model", str(path), str(photos), "--out", str(out), "--quiet", "--format", "npy",
                     "--views", "rollout,relevance,legrad,grad_rollout", "--precision", "fp32", "--backward", mode,
                     "--workers", workers]) == 0
        first[mode] = capsys.readouterr().err.splitlines()[0]
        files[mode] = {p.relative_to(out): np.load(p) for p in sorted(out.rglob("*.npy"))}
    assert "(streamed passes, each block recomputed in the backward)" in first["recompute"]
    assert "(streamed passes, every block's graph kept)" in first["keep"]
    assert "(streamed passes)" in first["auto"]
    assert len(files["keep"]) == 12 and files["keep"].keys() == files["recompute"].keys() == files["auto"].keys()
    for name, m in files["keep"].items():
        np.testing.assert_array_equal(files["recompute"][name], m, err_msg=str(name))
        np.testing.assert_array_equal(files["auto"][name], m, err_msg=str(name))
    # evaluate: the same table whichever backward
    tables = {}
    for mode in ("keep", "recompute"):
        csv = tmp_path / f"{mode}.csv"
        assert main(["evaluate", str(path), str(photos), "--views", "relevance,legrad", "--steps", "3", "--seeds",
                     "2", "--backward", mode, "--csv", str(csv)]) == 0
        tables[mode] = csv.read_text()
    assert tables["keep"] == tables["recompute"] and "legrad" in tables["keep"]
    # stats: the same numbers with one reading thread or three
    outs = []
    for workers in ("1", "3"):
        out = tmp_path / f"stats{workers}"
        assert main(["stats", "--model", str(path), str(photos), "--out", str(out), "--quiet", "--precision", "fp32",
                     "--workers", workers]) == 0
        outs.append(sorted((p.name, p.read_bytes()) for p in out.glob("*.csv")))
    assert outs[0] == outs[1] and outs[0]


def test_predict_refuses_a_model_whose_output_is_not_finite(tiny_ckpt, tmp_path, capsys):
    """A NaN weight reaches the output: one line naming the image and the cause, no 'nan' probabilities printed."""
    from vitviz.model import load_checkpoint, save_checkpoint

    _, path = tiny_ckpt
    m = load_checkpoint(path)
    with torch.no_grad():
        m.head.weight[0, 0] = float("nan")
    bad_model = save_checkpoint(m, tmp_path / "nan.safetensors")
    img = tmp_path / "x.png"
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(img)
    assert main(["predict", str(bad_model), str(img), "--precision", "fp32"]) == 2
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and str(img) in lines[0] and "non-finite" in lines[0] and "Traceback" not in err
    assert "nan" not in out.lower()
