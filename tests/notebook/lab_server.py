"""A JupyterLab server on 127.0.0.1 for the real-browser tests (and ``bench/notebook.py``), and the system's Chromium
for Playwright (which cannot download its own browsers here): :func:`running_lab`, :func:`chromium`,
:func:`write_notebook`, :func:`open_notebook`."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def chromium_path() -> str | None:
    """The system's Chromium (Debian's ``chromium`` package), or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").is_file() else None


@contextmanager
def chromium():
    """A headless Chromium under Playwright (sync API)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@dataclass(frozen=True)
class Lab:
    url: str
    token: str
    root: Path
    log: Path

    def notebook_url(self, name: str) -> str:
        return f"{self.url}/lab/tree/{name}?token={self.token}&reset"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_lab(root: Path, *, timeout: float = 180.0):
    """JupyterLab serving ``root`` on a free port of 127.0.0.1 with a random token, its kernels importing this
    checkout's vitviz; its own config, runtime and workspace folders under ``root`` (no user settings)."""
    port, token = _free_port(), secrets.token_hex(16)
    home = root / ".lab"
    for d in ("config", "data", "runtime", "settings", "workspaces"):
        (home / d).mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=str(REPO), JUPYTER_CONFIG_DIR=str(home / "config"),
               JUPYTER_RUNTIME_DIR=str(home / "runtime"), JUPYTERLAB_SETTINGS_DIR=str(home / "settings"),
               JUPYTERLAB_WORKSPACES_DIR=str(home / "workspaces"), MPLBACKEND="Agg",
               PATH=str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", ""))
    log = root / ".lab" / "server.log"
    cmd = [sys.executable, "-m", "jupyterlab", "--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}",
           "--ServerApp.port_retries=0", f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
           "--ServerApp.disable_check_xsrf=True", "--LabApp.expose_app_in_browser=True",
           "--LabApp.news_url=", "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:  # containers, CI runners
        cmd.append("--allow-root")
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, cwd=root, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:  # until the server answers (a condition, polled)
            if proc.poll() is not None:
                raise RuntimeError(f"JupyterLab exited ({proc.returncode}): {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"JupyterLab did not answer in {timeout:.0f} s: {log.read_text()[-2000:]}")
            time.sleep(0.2)
        yield Lab(url=url, token=token, root=root, log=log)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


def write_notebook(path: Path, *cells: str) -> Path:
    """A notebook of code ``cells`` (nbformat 4, Python 3 kernel)."""
    nb = {"nbformat": 4, "nbformat_minor": 5,
          "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
          "cells": [{"cell_type": "code", "id": f"c{i}", "metadata": {}, "execution_count": None, "outputs": [],
                     "source": src} for i, src in enumerate(cells)]}
    path.write_text(json.dumps(nb), encoding="utf-8")
    return path


def open_notebook(page, lab: Lab, name: str, *, timeout_ms: float = 240_000) -> None:
    """Open notebook ``name``, run all its cells once its kernel is idle, and wait until a vitviz viewer painted."""
    page.goto(lab.notebook_url(name))
    page.wait_for_function(
        "() => { const a = window.jupyterapp; const w = a && a.shell.currentWidget;"
        " return !!(w && w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel"
        " && w.sessionContext.session.kernel.status === 'idle'); }", timeout=timeout_ms)
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    page.wait_for_function("() => { const r = document.querySelector('.vitviz'); return !!(r && r.dataset.painted); }",
                           timeout=timeout_ms)
