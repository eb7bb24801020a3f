"""Start-up (vitviz.gui.startup): the window is on screen before torch, matplotlib and the like are imported, and the
model opens on the worker only once it is. Checked by what is loaded, never by how long it took."""

import os
import signal
import subprocess
import sys
import threading

import pytest
from repo_paths import REPO

from vitviz.resources import default_model_path, sample_images


def _launch_until(argv: list[str], lines: tuple[str, ...], tmp_path, timeout: float = 240.0) -> dict[str, str]:
    """Run ``python -m vitviz ARGV`` offscreen with the start-up log; return each wanted start-up line as printed
    (the process is killed once the last one came, or at ``timeout``)."""
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen", VITVIZ_STARTUP_LOG="1",
               VITVIZ_SETTINGS=str(tmp_path / "settings.ini"), TORCH_HOME=str(tmp_path / "torch"))
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    proc = subprocess.Popen([sys.executable, "-m", "vitviz", *argv], env=env, cwd=tmp_path, text=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    found: dict[str, str] = {}
    tail: list[str] = []
    done = threading.Event()

    def read():
        for line in proc.stderr:
            tail.append(line.rstrip())
            for what in lines:
                if line.startswith(f"vitviz: {what} after ") and what not in found:
                    found[what] = line.strip()
            if len(found) == len(lines):
                break
        done.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    done.wait(timeout)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(30)
    reader.join(30)
    proc.stderr.close()
    assert len(found) == len(lines), "start-up lines missing; the app said:\n" + "\n".join(tail[-15:])
    return found


@pytest.mark.parametrize("argv", [[], ["--model", "CHECKPOINT", "SAMPLE"]], ids=["remembered-demo", "model-and-image"])
def test_the_window_is_shown_before_torch_and_matplotlib_are_imported(argv, tmp_path):
    """The real command: the window path (Qt, pyqtgraph, numpy, the torch-free modules, and parsing ``--model``)
    imports none of the heavy libraries; the first overlay then comes with torch, loaded on the worker."""
    argv = [{"CHECKPOINT": str(default_model_path()), "SAMPLE": str(sample_images()[0])}.get(a, a) for a in argv]
    found = _launch_until(argv, ("window shown", "first overlay"), tmp_path)
    assert found["window shown"].endswith("(heavy modules loaded: none)"), found["window shown"]
    overlay = found["first overlay"]
    assert "torch" in overlay.split("heavy modules loaded:")[1] and "matplotlib" not in overlay, overlay


def test_naming_a_model_at_launch_does_not_import_torch():
    """``vitviz --model X`` parses X before the window opens: a path, a torchvision name or a curated Hub key must
    not pull torch onto the GUI thread (it did through the torchvision registry)."""
    code = ("import sys\n"
            "from vitviz.model.sources.refs import parse_model_ref\n"
            f"refs = [parse_model_ref(n) for n in ({str(default_model_path())!r}, 'vit_b_16', 'dino-s8', 'demo')]\n"
            "print(refs)\n"
            "assert 'torch' not in sys.modules, 'torch'\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert r.returncode == 0, r.stderr[-2000:]
    assert "'file:" in r.stdout and "'pretrained:vit_b_16'" in r.stdout and "'hub:" in r.stdout, r.stdout


def test_jobs_wait_for_the_window_then_run_in_order(qtbot):
    """WorkAfterShow holds the runner until the window's first show has been handled, then runs what was put off
    and releases the jobs; the job submitted while held runs after that."""
    from PySide6.QtWidgets import QWidget

    from vitviz.gui.startup import WorkAfterShow
    from vitviz.gui.worker import TaskRunner

    w = QWidget()
    qtbot.addWidget(w)
    runner = TaskRunner()
    gate = WorkAfterShow(w, runner)
    order: list[str] = []
    gate.after_show(lambda: order.append("after show"))
    runner.submit("model", lambda job: order.append("job") or "ok")
    assert runner.held and order == []
    w.show()
    qtbot.waitUntil(lambda: order == ["after show", "job"], timeout=30000)
    assert not runner.held
    gate.after_show(lambda: order.append("now"))  # once up: at once
    assert order[-1] == "now"
    runner.shutdown()


def test_a_window_never_shown_releases_its_jobs_at_the_first_turn_of_the_event_loop(qtbot):
    """Tests and scripts build windows without showing them: their model still loads."""
    from PySide6.QtWidgets import QWidget

    from vitviz.gui.startup import WorkAfterShow
    from vitviz.gui.worker import TaskRunner

    w = QWidget()
    qtbot.addWidget(w)
    runner = TaskRunner()
    WorkAfterShow(w, runner)
    with qtbot.waitSignal(runner.done, timeout=30000) as blocker:
        runner.submit("model", lambda job: 42)
    assert blocker.args[1] == 42 and not runner.held and not w.isVisible()
    runner.shutdown()


def test_the_run_on_request_pages_are_built_when_first_opened(qtbot, window, image_path):
    """The Faithfulness and "Lens · knock-out" pages are not built with the window; opened after an image was, each
    is attached to the window's controller and shows the window's session, as if built from the start."""
    from gui_helpers import open_and_wait

    from vitviz.gui.faithfulness import FaithfulnessPanel
    from vitviz.gui.mechanistic_panel import MechanisticPanel

    assert window.findChildren(FaithfulnessPanel) == [] and window.findChildren(MechanisticPanel) == []
    open_and_wait(qtbot, window, image_path)
    tabs = window.plots
    tabs.setCurrentIndex([tabs.tabText(i) for i in range(tabs.count())].index("Faithfulness"))  # as a click does
    panels = window.findChildren(FaithfulnessPanel)
    assert len(panels) == 1 and panels[0].isVisible()
    assert panels[0].controller is window.controller and panels[0].session is window.session
    assert window.findChildren(MechanisticPanel) == []
    lens = window.plots.mechanistic  # asked for by code: built then
    assert window.findChildren(MechanisticPanel) == [lens] and lens.session is window.session
    assert lens.controller is window.controller
    with qtbot.waitSignal(window.plots.layerHeadSelected, timeout=5000) as sig:  # its clicks reach the window
        lens.layerHeadSelected.emit(1, 2)
    assert sig.args == [1, 2]


def test_the_filters_pca_waits_for_the_filters_tab(qtbot, window, image_path, monkeypatch):
    """The patch-embedding filters' principal components (seconds for a large model on a loaded machine) are
    computed when the Filters tab is first shown, not before the first result is drawn; once per model."""
    from gui_helpers import open_and_wait

    import vitviz.analysis

    calls = []
    real = vitviz.analysis.embedding_filters
    monkeypatch.setattr(vitviz.analysis, "embedding_filters", lambda *a, **k: calls.append(1) or real(*a, **k))
    open_and_wait(qtbot, window, image_path)
    assert calls == []
    tabs = window.plots
    tabs.setCurrentIndex([tabs.tabText(i) for i in range(tabs.count())].index("Filters"))
    assert calls == [1] and "principal components" in tabs.filter_title.text()
    tabs.setCurrentIndex(0)
    tabs.setCurrentIndex([tabs.tabText(i) for i in range(tabs.count())].index("Filters"))
    assert calls == [1]


def test_pyside_is_told_which_modules_use_it_without_their_sources_being_read_and_kept(tmp_path, monkeypatch):
    """PySide6 asks of every module imported after it whether its source contains "PySide6" (through
    ``inspect.getsource``, which kept every module's lines in linecache: 0.15-0.2 s of torch's import). vitviz.gui
    answers from the file's bytes: the answer is the source text's, and a module without Qt is not kept in linecache."""
    import inspect
    import linecache

    import vitviz.gui  # noqa: F401

    feature = sys.modules["shibokensupport.feature"]
    probes = {"vitviz_probe_plain": "X = 1\n", "vitviz_probe_qt": "# drawn with PySide6\nX = 2\n"}
    monkeypatch.syspath_prepend(str(tmp_path))
    for name, text in probes.items():
        (tmp_path / f"{name}.py").write_text(text)
        monkeypatch.delitem(sys.modules, name, raising=False)
        monkeypatch.delitem(feature.pyside_feature_dict, name, raising=False)
        exec(f"import {name}")  # through builtins.__import__, as the app's imports go (importlib's would not)
    assert feature.pyside_feature_dict["vitviz_probe_plain"] == -1  # -1: "ignore this module"
    assert feature.pyside_feature_dict["vitviz_probe_qt"] == 0  # 0: uses PySide, no feature selected
    assert str(tmp_path / "vitviz_probe_plain.py") not in linecache.cache

    def in_source(module):  # PySide6's own question, asked of the source text
        try:
            return "PySide6" in inspect.getsource(module)
        except (TypeError, OSError, SyntaxError):
            return False

    files = [m for m in list(sys.modules.values()) if str(vars(m).get("__file__")).endswith(".py")]
    assert len(files) > 200
    wrong = [m.__name__ for m in files if feature._mod_uses_pyside(m) != in_source(m)]
    assert wrong == []


@pytest.mark.parametrize("first", ["", "import torch\n"], ids=["alone", "after-torch"])
def test_pyqtgraph_s_copies_of_qt_fetch_each_name_when_first_used(first):
    """pyqtgraph copies every name of QtCore, QtGui and QtWidgets into its own modules, which made PySide6 build the
    Python type of every Qt class (about 720) at start-up; vitviz.gui gives it modules that fetch a name when first
    used: fewer types are built, pyqtgraph's names are PySide6's objects, what pyqtgraph adds stays in its copies,
    and PySide6's modules list all their names again afterwards. Also where torch (and with it cuda-python) was
    imported first, as a notebook or a script may."""
    code = (first
            + "from PySide6.QtWidgets import QApplication\n"
            "app = QApplication([])\n"
            "import vitviz.gui\n"
            "import pyqtgraph as pg\n"
            "from PySide6 import QtCore, QtGui, QtWidgets\n"
            "from pyqtgraph.Qt import QtCore as C, QtGui as G, QtWidgets as W\n"
            "mods = (QtCore, QtGui, QtWidgets)\n"
            "built, names = sum(len(vars(m)) for m in mods), sum(len(dir(m)) for m in mods)\n"
            "print('built', built, 'of', names)\n"
            "assert names > 600 and built < 0.6 * names, (built, names)\n"
            "assert W.QDial is QtWidgets.QDial and C.QPointF is QtCore.QPointF and G.QImage is QtGui.QImage\n"
            "assert C.__version__ == QtCore.__version__\n"
            "assert hasattr(W, 'QOpenGLWidget') and not hasattr(QtWidgets, 'QOpenGLWidget')\n"
            "assert 'QDial' in dir(QtWidgets) and 'QPointF' in dir(QtCore)\n"
            "try:\n"
            "    W.QNoSuchWidget\n"
            "except AttributeError:\n"
            "    pass\n"
            "else:\n"
            "    raise AssertionError('a name PySide6 lacks was found')\n"
            "w = pg.PlotWidget()\n"
            "print('ok')\n")
    env = dict(os.environ, PYTHONPATH=str(REPO), QT_QPA_PLATFORM="offscreen")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, env=env)
    assert r.returncode == 0 and r.stdout.strip().endswith("ok"), r.stdout + r.stderr[-2000:]
