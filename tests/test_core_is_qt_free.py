"""Design convention 1: the core (everything outside vitviz.gui) never imports Qt."""

import ast
import subprocess
import sys
from pathlib import Path

import vitviz

PKG = Path(vitviz.__file__).resolve().parent
QT_MODULES = ("PySide6", "PySide2", "PyQt5", "PyQt6", "pyqtgraph", "shiboken6", "superqt", "qtpy")


def _core_files():
    return [p for p in PKG.rglob("*.py") if "gui" not in p.relative_to(PKG).parts]


def test_no_qt_import_statements_in_core():
    offenders = []
    for path in _core_files():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            for n in names:
                if n.split(".")[0] in QT_MODULES:
                    offenders.append(f"{path.relative_to(PKG)}:{node.lineno} imports {n}")
    assert len(_core_files()) >= 5
    assert not offenders, offenders


def test_importing_every_core_module_loads_no_qt():
    mods = []
    for p in _core_files():
        parts = p.relative_to(PKG).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts and parts[-1] in ("__main__", "train"):  # entry points run code on import
            continue
        mods.append(".".join(("vitviz",) + parts))
    code = (
        "import importlib, sys\n"
        f"for m in {mods!r}:\n"
        "    importlib.import_module(m)\n"
        f"bad = [m for m in sys.modules if m.split('.')[0] in {QT_MODULES!r}]\n"
        "print('LOADED', len(sys.modules)); assert not bad, bad\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "LOADED" in r.stdout


def test_public_api_is_lazy_and_complete():
    code = (
        "import sys, vitviz\n"
        "assert 'torch' not in sys.modules, 'import vitviz must stay cheap'\n"
        "from vitviz.capture import capture\n"
        "for n in vitviz.__all__:\n"
        "    getattr(vitviz, n)\n"
        "assert callable(vitviz.load_checkpoint) and callable(vitviz.analysis.attention_rollout)\n"
        "print('OK')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and "OK" in r.stdout, r.stderr[-3000:]
