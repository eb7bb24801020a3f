"""The corpus of bad model names and of the user's own model files, through the library, the command line and the
window.

A *name* case is something typed where a model is named (``vitviz info NAME``, ``--model NAME``, "Open model by
name", :func:`~vitviz.model.sources.refs.parse_model_ref`, :meth:`vitviz.Pipeline.open`) that names no model: a
mistyped name (with the "did you mean" a close one gets), an id that cannot exist on the Hub, a missing checkpoint
file, an empty or unprintable name, the user's ``FILE.py:CLASS`` where only names are taken. A *module* case is the
user's own ``FILE.py:CLASS`` (``vitviz --model``, :meth:`vitviz.Pipeline.open`) whose file or class is missing or
whose ``forward`` raises.

Every case has its exact line: it names what was typed (or the user's file and class) and the cause, is shorter
than 200 characters, carries the suggestion where one is expected, and is the only line on stderr, with exit status
2 and no traceback. Names run in this process (``vitviz.cli.main``, the library, one window) and through real
``python -m vitviz`` processes (a batched ``info`` of every name, one line each in order; a single name; a user file
whose forward raises).
"""

from __future__ import annotations

import os
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from repo_paths import REPO

from vitviz.capture.foreign import ForwardError
from vitviz.cli import main
from vitviz.model.sources.name_errors import ModelNameError
from vitviz.model.sources.refs import parse_model_ref
from vitviz.pipeline import Pipeline, open_adapted

CLI_TIMEOUT = 120
MAX_LINE = 200
LISTED = " ('vitviz models' lists the names)"
NO_FILE = "no such file, and not a known model name"
NOT_AN_ID = "no such file or directory, nor a Hugging Face Hub id"
USER_FILE = '''"""A user's own ViT file (written by the corpus): a tiny working model, models whose forward raises."""

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        return self.norm(x + self.attn(x, x, x)[0])


class TinyViT(nn.Module):
    def __init__(self, img_size=32, patch=8, dim=16, depth=2, heads=2, classes=3):
        super().__init__()
        self.img_size = img_size
        self.proj = nn.Conv2d(3, dim, patch, patch)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, (img_size // patch) ** 2 + 1, dim))
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        t = self.proj(x).flatten(2).transpose(1, 2)
        t = torch.cat([self.cls_token.expand(len(t), -1, -1), t], 1) + self.pos_embed
        return self.head(self.blocks(t)[:, 0])


class MyViT(TinyViT):
    def forward(self, x):
        raise ValueError("boom in forward")


class Silent(TinyViT):
    def forward(self, x):
        raise RuntimeError()


class LaterBoom(TinyViT):
    """Runs on the blank image vitviz checks a model with; raises on a real image."""

    def forward(self, x):
        if bool(x.abs().sum() > 0):
            raise KeyError("real images")
        return super().forward(x)


def make_boom():
    return MyViT()
'''


@dataclass(frozen=True)
class RefCase:
    """One input of this corpus.

    Attributes:
        name: a unique id for messages.
        typed: what the user types (relative paths: relative to the corpus's folder, the working directory).
        line: the exact message (after ``vitviz COMMAND: error: ``).
        suggestion: the "did you mean" the line must carry, or None when it must carry none.
        argv: whether it can be a process argument (no NUL byte).
        library_open: whether :meth:`vitviz.Pipeline.open` gives the same line (False for ``FILE.py:CLASS``, which
            it opens as the user's module).
    """

    name: str
    typed: str
    line: str
    suggestion: str | None = None
    argv: bool = True
    library_open: bool = True


def _named(name: str, typed: str, cause: str, suggestion: str | None = None, **kw) -> RefCase:
    shown = typed if typed and typed == typed.strip() and typed.isprintable() and not typed.endswith(":") \
        else repr(typed)
    hint = f"; did you mean {suggestion}?" if suggestion else ""
    return RefCase(name, typed, f"{shown}: {cause}{hint}{LISTED}", suggestion, **kw)


LONG = "a" * 300
NAME_CASES: list[RefCase] = [
    # mistyped names: the close one suggested (curated keys, torchvision names, architectures, demo)
    _named("torchvision typo", "vit_b_17", NO_FILE, "vit_b_16"),
    _named("curated typo", "dino-s9", NO_FILE, "dino-s8"),
    _named("space for a dash", "dino s8", NO_FILE, "dino-s8"),
    _named("upper case", "DINO-S8", NO_FILE, "dino-s8"),
    _named("demo typo", "dmeo", NO_FILE, "demo"),
    _named("no underscores", "vitb16", NO_FILE, "vit_b_16"),
    _named("dashes for underscores", "vit-b-16", NO_FILE, "vit_b_16"),
    _named("underscore for a dash", "siglip_b16", NO_FILE, "siglip-b16"),
    _named("dinov2 underscore", "dinov2_s", NO_FILE, "dinov2-s"),
    _named("architecture typo", "vit_tiny_patch16_244", NO_FILE, "vit_tiny_patch16_224"),
    _named("deit typo", "deit_small_patch16_244", NO_FILE, "deit_small_patch16_224"),
    _named("trailing space", "demo ", NO_FILE, "demo"),
    # not a name at all: no suggestion
    _named("a word", "just-a-word", NO_FILE),
    _named("words", "no such thing", NO_FILE),
    _named("a CNN", "resnet50", NO_FILE),
    _named("windowed family", "swin_t", NO_FILE),
    # named references
    _named("pretrained typo", "pretrained:vit_b_17", "unknown torchvision weights", "vit_b_16"),
    _named("pretrained empty", "pretrained:", "no name after 'pretrained:'"),
    RefCase("random unknown", "random:nope",
            "random:nope: unknown architecture (random weights) (vitviz.list_models() lists them)"),
    RefCase("random typo", "random:vit_small_patch16_225",
            "random:vit_small_patch16_225: unknown architecture (random weights); did you mean vit_small_patch16_224? "
            "(vitviz.list_models() lists them)", "vit_small_patch16_224"),
    RefCase("file empty", "file:", "'file:': no path after 'file:'"),
    # Hub ids that cannot exist
    _named("dot-dot escape", "timm/../../etc", f"{NOT_AN_ID} (it has '..')"),
    _named("hf-hub empty", "hf-hub:",
           "not a Hugging Face Hub id (nothing after 'hf-hub:'; expected hf-hub:OWNER/NAME)"),
    _named("hf_hub empty", "hf_hub:",
           "not a Hugging Face Hub id (nothing after 'hf_hub:'; expected hf_hub:OWNER/NAME)"),
    _named("hf-hub space", "hf-hub:facebook/dino v2",
           "not a Hugging Face Hub id (it has a space; expected hf-hub:OWNER/NAME)"),
    _named("hf-hub trailing dot", "hf-hub:timm/vit_small_patch8_224.dino.",
           "not a Hugging Face Hub id (its name ends with '.'; expected hf-hub:OWNER/NAME)",
           "timm/vit_small_patch8_224.dino"),
    _named("id with a space", "facebook/dinov2 small", f"{NOT_AN_ID} (it has a space)"),
    _named("id with a revision", "owner/name@main", f"{NOT_AN_ID} (it has '@')"),
    _named("two slashes", "a/b/c", f"{NOT_AN_ID} (it has 2 '/')"),
    _named("nothing after the slash", "timm/", f"{NOT_AN_ID} (nothing after its '/')"),
    _named("nothing before the slash", "/timm", f"{NOT_AN_ID} (nothing before its '/')"),
    _named("double dash", "a--b/c", f"{NOT_AN_ID} (it has '--')"),
    _named("leading dash", "-owner/name", f"{NOT_AN_ID} (its owner starts with '-')"),
    _named("hub no slash", "hub:bad", "not a Hugging Face Hub id (it has no '/'; expected hub:OWNER/NAME)"),
    _named("hub empty", "hub:", "not a Hugging Face Hub id (nothing after 'hub:'; expected hub:OWNER/NAME)"),
    _named("hub file name", "hub:x/y.pth", "not a Hugging Face Hub id (it ends in .pth, like a file; expected "
                                           "hub:OWNER/NAME)"),
    _named("hub with a curated key", "hub:dino-s8",
           "not a Hugging Face Hub id (it has no '/'; expected hub:OWNER/NAME)", "dino-s8"),
    # missing checkpoint files (a close file in the folder suggested)
    _named("missing .pth", "missing.pth", "no such file or directory"),
    _named("missing in a folder", "runs/missing.safetensors", "no such file or directory"),
    _named("file typo", "modle.pth", "no such file or directory", "model.pth"),
    _named("file typo in a folder", "runs/bset.safetensors", "no such file or directory", "best.safetensors"),
    _named("missing folders", "nowhere/deep/x.safetensors", "no such file or directory"),
    _named("upper-case suffix", "ckpt.PTH", "no such file or directory"),
    _named("backslash path", "dir\\win.pth", "no such file or directory"),
    _named("unknown user", "~nosuchuser_vitviz/m.pth", "no such file or directory"),
    # empty, unprintable, too long for the system
    _named("empty", "", "no model name"),
    _named("blank", "   ", "no model name"),
    _named("line break", "line\nbreak", NO_FILE),
    _named("NUL byte", "x\x00y", NO_FILE, argv=False),
    RefCase("too long", LONG, f"{'a' * 70}…{'a' * 25}: {NO_FILE}{LISTED}"),
    # the user's own class where only names are taken
    RefCase("own class by name", "my_vit.py:MyViT", "my_vit.py:MyViT: your own model class opens with 'vitviz --model "
            "FILE.py:CLASS' or vitviz.Pipeline.open, not here", library_open=False),
    RefCase("own class, no file", "nope.py:MyViT", "nope.py:MyViT: no such file nope.py", library_open=False),
    RefCase("own class, file typo", "my_vti.py:MyViT", "my_vti.py:MyViT: no such file my_vti.py; did you mean "
            "my_vit.py?", "my_vit.py", library_open=False),
]

MODULE_CASES: list[RefCase] = [
    RefCase("forward raises", "my_vit.py:MyViT", "my_vit.py:MyViT forward raised ValueError: boom in forward"),
    RefCase("forward raises, no text", "my_vit.py:Silent", "my_vit.py:Silent forward raised RuntimeError"),
    RefCase("factory's module raises", "my_vit.py:make_boom",
            "my_vit.py:MyViT forward raised ValueError: boom in forward"),
    RefCase("class typo", "my_vit.py:MyVit", "my_vit.py: defines no 'MyVit'; did you mean MyViT?", "MyViT"),
    RefCase("no such class", "my_vit.py:Nothing",
            "my_vit.py: defines no 'Nothing'; its nn.Module classes: Block, LaterBoom, MyViT, Silent, TinyViT"),
    RefCase("no such file", "nope.py:MyViT", "nope.py: no such file"),
    RefCase("file typo", "my_vti.py:MyViT", "my_vti.py: no such file; did you mean my_vit.py?", "my_vit.py"),
]


@pytest.fixture(scope="module")
def place(tmp_path_factory) -> Path:
    """The corpus's folder (the working directory of every case): the user's file, files to be mistyped."""
    root = tmp_path_factory.mktemp("model_refs")
    (root / "my_vit.py").write_text(USER_FILE, encoding="utf-8")
    (root / "model.pth").write_bytes(b"not read: only its name is close to a typo")
    (root / "runs").mkdir()
    (root / "runs" / "best.safetensors").write_bytes(b"not read either")
    return root


@pytest.fixture
def here(place, monkeypatch) -> Path:
    monkeypatch.chdir(place)
    return place


def _check_line(case: RefCase, line: str, prefix: str) -> None:
    assert line == prefix + case.line, (case.name, line)
    assert len(case.line) < MAX_LINE, (case.name, len(case.line))
    if case.suggestion is None:
        assert "did you mean" not in line, case.name
    else:
        assert f"did you mean {case.suggestion}?" in line, case.name


def _cli(argv: list[str], capsys) -> tuple[int, list[str], str]:
    capsys.readouterr()
    status = main(argv)
    got = capsys.readouterr()
    assert "Traceback" not in got.err
    return status, got.err.splitlines(), got.out


def test_the_corpus_is_large_and_every_line_is_short():
    cases = NAME_CASES + MODULE_CASES
    assert len(cases) >= 30
    assert len({c.name for c in NAME_CASES}) == len(NAME_CASES)
    assert len({c.name for c in MODULE_CASES}) == len(MODULE_CASES)
    for c in cases:
        assert len(c.line) < MAX_LINE and "\n" not in c.line, c.name
        assert (c.suggestion is None) == ("did you mean" not in c.line), c.name


# ---------------------------------------------------------------------------------------------------- the library
@pytest.mark.parametrize("case", NAME_CASES, ids=lambda c: c.name)
def test_names_through_the_library(here, case):
    with pytest.raises(ModelNameError) as e:
        parse_model_ref(case.typed)
    _check_line(case, str(e.value), "")
    if case.library_open:
        with pytest.raises(ModelNameError) as e:
            Pipeline.open(case.typed)
        _check_line(case, str(e.value), "")


@pytest.mark.parametrize("case", MODULE_CASES, ids=lambda c: c.name)
def test_users_modules_through_the_library(here, case):
    with pytest.raises((ForwardError, ValueError)) as e:
        Pipeline.open(case.typed)
    _check_line(case, str(e.value), "")
    if isinstance(e.value, ForwardError):  # the user's own exception is kept, with its traceback
        assert type(e.value.__cause__).__name__ in case.line and e.value.__cause__.__traceback__ is not None


# ------------------------------------------------------------------------------------ the command line, in process
@pytest.mark.parametrize("case", NAME_CASES, ids=lambda c: c.name)
def test_names_through_vitviz_info(here, case, capsys):
    dashes = ["--"] if case.typed.startswith("-") else []  # (else argparse reads it as an option)
    status, err, out = _cli(["info", *dashes, case.typed], capsys)
    assert status == 2 and out == "" and len(err) == 1, (case.name, err)
    _check_line(case, err[0], "vitviz info: error: ")


@pytest.mark.parametrize("case", [c for c in NAME_CASES if c.name in ("torchvision typo", "dot-dot escape",
                                                                      "file typo", "hf-hub empty")],
                         ids=lambda c: c.name)
def test_names_through_predict_and_export(here, case, capsys):
    Image.fromarray(np.full((20, 20, 3), 128, np.uint8)).save(here / "x.png")
    try:
        for argv, command in ((["predict", case.typed, "x.png"], "predict"),
                              (["export", "--model", case.typed, "x.png", "--out", "out", "--quiet"], "export")):
            status, err, out = _cli(argv, capsys)
            assert status == 2 and out == "" and len(err) == 1, (case.name, command, err)
            _check_line(case, err[0], f"vitviz {command}: error: ")
            assert not (here / "out").exists()  # refused before anything was written
    finally:
        (here / "x.png").unlink()


@pytest.fixture
def no_window(monkeypatch):
    """A vitviz.gui.app whose run_gui records its call: a case that gets that far failed to fail."""
    calls = []
    fake = types.ModuleType("vitviz.gui.app")
    fake.run_gui = lambda *a, **k: calls.append((a, k)) or 0
    monkeypatch.setitem(sys.modules, "vitviz.gui.app", fake)
    return calls


@pytest.mark.parametrize("case", MODULE_CASES, ids=lambda c: c.name)
def test_users_modules_through_vitviz_model(here, case, capsys, no_window):
    status, err, out = _cli(["--model", case.typed], capsys)
    assert status == 2 and out == "" and len(err) == 1, (case.name, err)
    _check_line(case, err[0], "vitviz: error: ")
    assert not no_window  # no window opened


# ---------------------------------------------------------------------------------------------- real processes
def _run(argv: list[str], cwd: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "VITVIZ_SETTINGS": str(tmp_path / "s.ini"),
           "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.run([sys.executable, "-m", "vitviz", *argv], cwd=cwd, capture_output=True, text=True,
                          timeout=CLI_TIMEOUT, env=env)


def test_every_name_through_one_real_info_process(place, tmp_path):
    cases = [c for c in NAME_CASES if c.argv]
    r = _run(["info", "--", *(c.typed for c in cases)], place, tmp_path)
    assert r.returncode == 2 and r.stdout == "" and "Traceback" not in r.stderr, r.stderr[-2000:]
    lines = r.stderr.splitlines()
    assert len(lines) == len(cases), r.stderr[-2000:]
    for case, line in zip(cases, lines):
        _check_line(case, line, "vitviz info: error: ")


@pytest.mark.parametrize("argv, prefix, case", [
    (["info"], "vitviz info: error: ", NAME_CASES[1]),  # dino-s9
    (["--model"], "vitviz: error: ", MODULE_CASES[0]),  # the user's forward raises: before any window
], ids=["info dino-s9", "--model my_vit.py:MyViT"])
def test_one_input_one_real_process(place, tmp_path, argv, prefix, case):
    r = _run([*argv, case.typed], place, tmp_path)
    assert r.returncode == 2 and r.stdout == "" and "Traceback" not in r.stderr, r.stderr[-2000:]
    lines = r.stderr.splitlines()
    assert len(lines) == 1, r.stderr
    _check_line(case, lines[0], prefix)


# ------------------------------------------------------------------------------------------------------ the window
@pytest.fixture
def window(qtbot, here, tmp_path, monkeypatch):
    """The window on the user's LaterBoom (its check passed; it raises on real images), with recorded dialogs."""
    sys.path.insert(0, str(REPO / "tests" / "gui"))
    from gui_helpers import Recorder
    from PySide6.QtCore import QSettings

    from vitviz.gui.app import make_app
    from vitviz.gui.main_window import MainWindow

    monkeypatch.setenv("VITVIZ_SETTINGS", str(tmp_path / "default-settings.ini"))
    make_app()
    model, _ = open_adapted("my_vit.py:LaterBoom")
    w = MainWindow(settings=QSettings(str(tmp_path / "s.ini"), QSettings.Format.IniFormat), model=model,
                   model_key="memory", dialogs=Recorder(), load_samples=False)
    qtbot.addWidget(w)
    w.show()
    qtbot.waitExposed(w)
    yield w
    w.close()


def test_the_window_says_each_line_in_one_dialog_and_stays_as_it_was(qtbot, window, here):
    w = window
    model, key = w.controller.model, w.model_key
    for case in NAME_CASES:
        before = len(w.dialogs.errors)
        w.dialogs.ask_model_name = lambda t=case.typed: t
        w.models.open_by_name()
        if not case.typed:  # an empty answer is the dialog cancelled: nothing said, nothing done
            assert len(w.dialogs.errors) == before and w.controller.model is model
            continue
        assert len(w.dialogs.errors) == before + 1, case.name
        title, message = w.dialogs.errors[-1]
        assert title == "Open model by name"
        _check_line(case, message, "")
        assert w.controller.model is model and w.model_key == key and not w.controller.loading
        assert not w.runner.is_busy() and not w.dialogs.confirms
    # the user's forward raising on a real image: one dialog naming the file, the class and the exception
    Image.fromarray(np.full((40, 40, 3), 200, np.uint8)).save(here / "photo.png")
    before = len(w.dialogs.errors)
    w.open_images([str(here / "photo.png")])
    qtbot.waitUntil(lambda: len(w.dialogs.errors) > before, timeout=30000)
    qtbot.waitUntil(lambda: not w.runner.is_busy(), timeout=30000)
    assert len(w.dialogs.errors) == before + 1, w.dialogs.errors[before:]
    message = w.dialogs.errors[-1][1]
    assert message.splitlines()[-1] == "my_vit.py:LaterBoom forward raised KeyError: 'real images'", message
    assert str(here / "photo.png") in message
    assert w.controller.model is model and w.session.result is None
