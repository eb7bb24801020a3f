"""A front end that cannot open a window says why in one line and never lets Qt abort the process: the Qt-free check
(:func:`vitviz._util.display.display_problem`) on every kind of missing display, and ``vitviz`` / ``vitviz.show`` in
processes without one (Qt, started there, aborts with SIGABRT: these would be killed, not answered)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from repo_paths import REPO

from vitviz._util.display import display_problem, qt_plugins_folder

LINUX = "linux"


@pytest.mark.parametrize("env,needle", [
    ({}, "no display (DISPLAY and WAYLAND_DISPLAY are not set"),
    ({"QT_QPA_PLATFORM": "xcb"}, "no X11 display (DISPLAY is not set)"),
    ({"QT_QPA_PLATFORM": "wayland", "DISPLAY": ":0"}, "no Wayland display (WAYLAND_DISPLAY is not set)"),
    ({"QT_QPA_PLATFORM": "nosuchplatform"}, "QT_QPA_PLATFORM=nosuchplatform names no Qt platform plugin (installed: "),
    ({"QT_QPA_PLATFORM": "x" * 5000}, "names no Qt platform plugin"),
])
def test_no_display_is_named(env, needle):
    problem = display_problem(env, LINUX)
    assert problem is not None and needle in problem and len(problem) < 300, problem


@pytest.mark.parametrize("env", [
    {"QT_QPA_PLATFORM": "offscreen"},
    {"QT_QPA_PLATFORM": "minimal"},
    {"WAYLAND_DISPLAY": "wayland-0"},
    {"QT_QPA_PLATFORM": "wayland", "WAYLAND_DISPLAY": "wayland-0"},
])
def test_a_display_or_a_headless_platform_is_no_problem(env):
    assert display_problem(env, LINUX) is None


def test_the_plugins_are_found_without_importing_qt():
    folder = qt_plugins_folder()
    assert folder is not None and any(folder.glob("*qoffscreen*"))


def test_x11_needs_its_cursor_library(monkeypatch):
    from vitviz._util import display

    monkeypatch.setattr(display.ctypes.util, "find_library", lambda name: None)
    assert "libxcb-cursor" in display_problem({"DISPLAY": ":0"}, LINUX)
    assert display_problem({"DISPLAY": ":0"}, "darwin") is None  # macOS and Windows sessions have a display


def _headless_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    return {**env, "PYTHONPATH": str(REPO)}


@pytest.mark.skipif(not sys.platform.startswith(LINUX), reason="a Linux process without a display")
def test_the_window_command_without_a_display_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run([sys.executable, "-m", "vitviz"], env=_headless_env(), cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 2, (done.returncode, done.stderr)  # (Qt's abort: -6)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vitviz: error: no window can open here: no display"), lines
    assert "Headless commands still work" in lines[0]


@pytest.mark.skipif(not sys.platform.startswith(LINUX), reason="a Linux process without a display")
def test_show_without_a_display_raises_and_the_process_lives_on(tmp_path):
    """As in a Jupyter kernel on a server, where the window is asked for (``notebook=False``; by default the notebook
    viewer shows there): the call raises one clear error, the caller goes on."""
    code = ("import vitviz\n"
            "try:\n"
            "    vitviz.show('demo', notebook=False)\n"
            "except vitviz.NoDisplay as e:\n"
            "    print('said:', e)\n"
            "print('still alive')\n")
    done = subprocess.run([sys.executable, "-c", code], env=_headless_env(), cwd=tmp_path, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, (done.returncode, done.stderr)
    said, alive = done.stdout.strip().splitlines()
    assert said.startswith("said: vitviz.show: no window can open here: no display") and alive == "still alive"
    assert "PySide6" not in done.stderr
