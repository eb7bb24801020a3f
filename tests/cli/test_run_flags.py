"""The run flags of every command that runs a model (issue 35 item 2, :mod:`vitviz.cli.run_flags`): ``--device``,
``--precision`` and, where the command batches, ``--batch-size``, from one table; each command's first line names the
precision it resolved; bad values are one line; ``predict --precision fp32`` prints the float32 probabilities."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from bounded_runs import cli
from PIL import Image
from repo_paths import REPO

from vitviz.cli.commands import COMMANDS
from vitviz.cli.dispatch import sub_parser
from vitviz.cli.gui_command import gui_parser
from vitviz.cli.run_flags import RUN_FLAGS
from vitviz.devices import resolve_precision

CLI = REPO / "vitviz" / "cli"
# the commands that batch (their --batch-size is checked like the others'); predict reads one image at a time
BATCHING = {"export", "stats", "evaluate"}


def runs_a_model(name: str) -> bool:
    """Whether ``vitviz NAME`` runs a model, read from its module and the ``vitviz.cli`` modules it imports from (lens,
    ablate and patch build theirs in mechanistic_flags): one of them builds a Pipeline."""
    text = (CLI / f"{name}_command.py").read_text(encoding="utf-8")
    helpers = re.findall(r"from vitviz\.cli\.(\w+) import", text)
    return any("Pipeline(" in (CLI / f"{m}.py").read_text(encoding="utf-8") for m in helpers) or "Pipeline" in text


def flag_actions(parser: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    """The options of a parser or of its one sub-command, by flag."""
    sub = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if sub:
        (parser,) = sub[0].choices.values()
    return {flag: a for a in parser._actions for flag in a.option_strings}


def test_the_model_running_commands_are_found():
    """The detector above sees the commands that run a model today (so that a new one is caught too)."""
    assert {n for n in COMMANDS if runs_a_model(n)} == {"predict", "evaluate", "export", "stats", "lens", "ablate",
                                                        "patch"}


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_model_running_command_has_the_run_flags_of_the_one_table(name):
    actions = flag_actions(sub_parser(name))
    if not runs_a_model(name):
        assert not set(RUN_FLAGS) & set(actions), name
        return
    wanted = [f for f in RUN_FLAGS if f != "--batch-size" or name in BATCHING]
    for flag in wanted:
        a, spec = actions.get(flag), RUN_FLAGS[flag]
        assert a is not None, f"vitviz {name} has no {flag}: add it with vitviz.cli.run_flags.add_run_flags"
        assert a.metavar == spec.get("metavar") and a.type is spec.get("type"), (name, flag)
        assert tuple(a.choices or ()) == tuple(spec.get("choices") or ()), (name, flag)
        if flag != "--batch-size":  # (what a batch holds and its default are the command's)
            assert a.help.startswith(spec["help"]) and a.default == spec["default"], (name, flag)
    assert ("--batch-size" in actions) == (name in BATCHING), name


def test_the_window_takes_device_and_precision_remembered_by_default():
    actions = flag_actions(gui_parser())
    for flag in ("--device", "--precision"):
        assert actions[flag].default is None and "the window's last choice" in actions[flag].help
        assert actions[flag].help.startswith(RUN_FLAGS[flag]["help"])
    assert tuple(actions["--precision"].choices) == RUN_FLAGS["--precision"]["choices"]
    assert "--batch-size" not in actions


def test_no_command_declares_a_run_flag_of_its_own():
    """The flags are written once: no other module of vitviz/cli adds --device, --precision or --batch-size."""
    pattern = re.compile(r"add_argument\(\s*\"--(device|precision|batch-size)\"")
    found = [p.name for p in CLI.glob("*.py") if p.name != "run_flags.py" and pattern.search(p.read_text("utf-8"))]
    assert found == []


# ------------------------------------------------------------------------------------------------ the commands run
@pytest.fixture
def world(tiny_ckpt, tmp_path):
    _, ckpt = tiny_ckpt
    imgs = tmp_path / "imgs"
    imgs.mkdir()
    rng = np.random.default_rng(0)
    for i in range(2):
        Image.fromarray(rng.integers(0, 255, (40, 44, 3), dtype=np.uint8)).save(imgs / f"i{i}.png")
    return tiny_ckpt[0], ckpt, imgs, tmp_path


def argv_of(world, command: str, *extra: str) -> list[str]:
    _, ckpt, imgs, root = world
    if command == "predict":
        return ["predict", str(ckpt), str(imgs / "i0.png"), *extra]
    if command == "evaluate":
        return ["evaluate", str(ckpt), str(imgs / "i0.png"), "--steps", "2", "--seeds", "1", "--views", "cls", *extra]
    out = ["--out", str(root / f"out-{command}")]
    if command == "export":
        return ["export", "--model", str(ckpt), str(imgs), *out, "--quiet", "--format", "npy", "--views", "cls", *extra]
    return ["stats", "--model", str(ckpt), str(imgs), *out, "--quiet", *extra]


MODEL_COMMANDS = ("predict", "evaluate", "export", "stats")


@pytest.mark.parametrize("command", MODEL_COMMANDS)
@pytest.mark.parametrize("precision", ["fp32", "bf16", "auto"])
def test_the_first_line_names_the_resolved_precision(world, capsys, command, precision):
    batch = ["--batch-size", "1"] if command in BATCHING else []
    status, err, _ = cli(argv_of(world, command, "--precision", precision, "--device", "cpu", *batch), capsys)
    assert status == 0, err
    resolved = resolve_precision(precision, "cpu")  # what this CPU runs "auto" in (bf16 with AVX-512 BF16)
    named = f"auto: {resolved} (" if precision == "auto" else f"cpu, {resolved}"
    assert err[0].startswith(f"vitviz {command}: ") and " tiny on cpu, " in err[0] and named in err[0], err[0]
    if batch:
        assert "; batch 1" in err[0], err[0]


# (id, extra flags, the message after "vitviz COMMAND: error: " (or argparse's "vitviz COMMAND: error: "))
BAD = [
    ("unknown device", ["--device", "quantum"], "--device quantum: not available here (available: cpu"),
    ("missing GPU", ["--device", "cuda:7"], "--device cuda:7: not available here"),
    ("fp16 on the CPU", ["--precision", "fp16"],
     "--precision fp16: not available on cpu (available: auto, fp32, bf16)"),
    ("unknown precision", ["--precision", "fp64"], "argument --precision: invalid choice: 'fp64'"),
]
BAD_BATCH = [
    ("batch 0", ["--batch-size", "0"], "--batch-size 0: must be at least 1"),
    ("negative batch", ["--batch-size", "-2"], "--batch-size -2: must be at least 1"),
    ("batch not a number", ["--batch-size", "many"], "argument --batch-size: invalid int value: 'many'"),
]


BAD_CASES = [(c, *case) for c in MODEL_COMMANDS for case in BAD + (BAD_BATCH if c in BATCHING else [])]


@pytest.mark.parametrize("command,name,extra,line", BAD_CASES, ids=[f"{c[0]}-{c[1]}" for c in BAD_CASES])
def test_bad_run_flags_are_one_line(world, capsys, command, name, extra, line):
    if name == "missing GPU" and torch.cuda.device_count() > 7:
        pytest.skip("this machine has a cuda:7")
    status, err, out = cli(argv_of(world, command, *extra), capsys)
    assert status == 2 and len(err) == 1, err
    assert err[0].startswith(f"vitviz {command}: error: {line}"), err[0]
    assert "Traceback" not in err[0] and out == ""


def test_predict_fp32_prints_the_float32_probabilities(world, capsys):
    model, ckpt, imgs, _ = world
    image = imgs / "i0.png"
    x = model.spec.preprocess(Image.open(image).convert("RGB"))[None]
    with torch.no_grad():
        ref = model.float()(x)[0].softmax(-1)  # independent: the model's own forward in float32
    printed = {}
    for precision in ("fp32", "bf16"):
        status, err, out = cli(["predict", str(ckpt), str(image), "--precision", precision, "--top", "3"], capsys)
        assert status == 0, err
        printed[precision] = {int(r.split()[0]): float(r.split()[1]) for r in out.splitlines()[1:]}
    for i, p in printed["fp32"].items():
        assert abs(p - float(ref[i])) <= 5e-4 + 1e-7, (i, p, float(ref[i]))  # printed to 3 places
    assert printed["fp32"].keys() == printed["bf16"].keys() == {0, 1, 2}


def test_run_flags_are_listed_in_each_commands_help(capsys):
    for name in MODEL_COMMANDS:
        with pytest.raises(SystemExit):
            sub_parser(name).parse_args([name, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "--device DEVICE" in text and "--precision {auto,fp32,bf16,fp16}" in text, name
        assert ("--batch-size N" in text) == (name in BATCHING), name


def test_the_run_flags_module_imports_no_torch():
    import os
    import subprocess
    import sys

    code = "import sys, vitviz.cli.run_flags, vitviz.cli.gui_command; print('torch' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(REPO), check=True,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.stdout.strip() == "False", r.stderr
