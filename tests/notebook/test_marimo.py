"""A marimo smoke test: ``marimo export html`` runs a notebook that shows a viewer on the demo model through
``mo.ui.anywidget``; the viewer is built inside marimo's runtime (where ``vitviz.show`` routes to it) and the page
carries the widget."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("anywidget")
pytest.importorskip("marimo")

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parent.parent.parent

NOTEBOOK = '''import marimo

app = marimo.App()


@app.cell
def _():
    import marimo as mo

    import vitviz.notebook
    from vitviz.notebook.routing import in_notebook_kernel

    viewer = vitviz.notebook.Viewer("demo")
    print("VITVIZ", in_notebook_kernel(), viewer.view, viewer.meta["count"], viewer.status == "")
    mo.ui.anywidget(viewer)
    return


if __name__ == "__main__":
    app.run()
'''


def test_marimo_exports_a_notebook_with_the_viewer(tmp_path):
    (tmp_path / "nb.py").write_text(NOTEBOOK, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(REPO), MPLBACKEND="Agg")
    env.pop("QT_QPA_PLATFORM", None)
    r = subprocess.run([sys.executable, "-m", "marimo", "export", "html", "nb.py", "-o", "out.html"], cwd=tmp_path,
                       env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    html = (tmp_path / "out.html").read_text(encoding="utf-8")
    assert "VITVIZ True cls 4 True" in html  # marimo is seen as a notebook; the demo's 4 layers as frames; no error
    assert "marimo-anywidget" in html
