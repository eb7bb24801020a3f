"""The desktop app (PySide6 + pyqtgraph): the only package that imports Qt.

Three things are done here, before anything else of the app is imported, for the window's start-up and the first
model's (torch's import comes after Qt's, on the worker):

* PySide6 asks of every module imported after it whether its source contains "PySide6" (for its opt-in
  ``from __feature__ import ...``), with ``inspect.getsource``: linecache reads, decodes and splits each module's
  source into lines and keeps them for the life of the process (torch's ~930 modules: 0.15-0.18 s of its import and
  about 480,000 lines held). :func:`_answer_pyside_use_from_the_bytes` gives PySide6 the same answer from the file's
  bytes: a module whose file lacks the bytes ``PySide6`` cannot have them in its source (Python source is in an
  ASCII-compatible encoding); the others (Qt's users, about a hundred) are asked as before.
* pyqtgraph is imported without cuda-python: ``import pyqtgraph`` loads its ``RawImageWidget``, which imports
  ``cuda.bindings.runtime`` when it is installed (torch's CUDA wheels install it) for a CUDA-OpenGL path vitviz never
  uses (it draws from numpy arrays): 60-70 ms of the window's start-up. The block lasts for that import only; torch and
  anything else import cuda-python as usual afterwards.
* pyqtgraph keeps its own copies of QtCore, QtGui and QtWidgets (``pyqtgraph.Qt.QtCore``, ...: empty modules it fills
  with every name of PySide6's, so that what it adds stays out of PySide6's modules). PySide6 builds a class's Python
  type when the class is first asked for, so the copy built all of them (about 720: 0.18 s) where the built window
  has used 341. :func:`_import_pyqtgraph` puts stand-ins for those empty modules in place that fetch a name from
  PySide6 when first asked for and keep it (later uses read the stand-in's own dictionary, as they read the copy's);
  PySide6's modules list no names while pyqtgraph copies (its copy then copies nothing). Where the installed
  pyqtgraph's modules are not empty, pyqtgraph is imported as it is.
"""

import importlib.util
import sys
import types
from pathlib import Path

import PySide6.QtCore  # noqa: F401  # installs PySide6's import hook (shibokensupport.feature)


def _answer_pyside_use_from_the_bytes() -> None:
    feature = sys.modules.get("shibokensupport.feature")
    asked = getattr(feature, "_mod_uses_pyside", None)
    if asked is None or getattr(asked, "answered_from_the_bytes", False):
        return

    def uses_pyside(module) -> bool:
        path = getattr(module, "__file__", None)
        if isinstance(path, str) and path.endswith(".py"):
            try:
                with open(path, "rb") as f:
                    if b"PySide6" not in f.read():
                        return False
            except OSError:
                pass
        return asked(module)

    uses_pyside.answered_from_the_bytes = True  # type: ignore[attr-defined]
    feature._mod_uses_pyside = uses_pyside


QT_MODULES = ("QtCore", "QtGui", "QtWidgets")


def _fetching_stand_in(name: str, source: types.ModuleType, file: Path) -> types.ModuleType:
    """A module named ``name`` (a package, as pyqtgraph's is) whose missing names are fetched from ``source`` when
    first asked for and kept."""
    module = types.ModuleType(name)
    module.__file__, module.__path__ = str(file), [str(file.parent)]

    def fetch(attr: str):
        value = getattr(source, attr)  # AttributeError where PySide6 has no such name, as the copy had not
        setattr(module, attr, value)
        return value

    module.__getattr__ = fetch  # type: ignore[method-assign]  # PEP 562: called for names not in the dictionary
    return module


def _empty_qt_copies() -> dict[str, Path] | None:
    """pyqtgraph's files of its Qt copies, where all three exist and are empty (the form the stand-ins replace)."""
    spec = importlib.util.find_spec("pyqtgraph")
    if spec is None or not spec.submodule_search_locations:
        return None
    files = {m: Path(spec.submodule_search_locations[0]) / "Qt" / m / "__init__.py" for m in QT_MODULES}
    try:
        return files if all(f.stat().st_size == 0 for f in files.values()) else None
    except OSError:
        return None


def _import_pyqtgraph() -> None:
    if "pyqtgraph" in sys.modules:
        return
    copies = _empty_qt_copies()
    sources = {m: importlib.import_module(f"PySide6.{m}") for m in QT_MODULES} if copies else {}
    listings = {m: src.__dict__.get("__dir__") for m, src in sources.items()}
    for m, src in sources.items():
        sys.modules[f"pyqtgraph.Qt.{m}"] = _fetching_stand_in(f"pyqtgraph.Qt.{m}", src, copies[m])
        src.__dir__ = list  # type: ignore[attr-defined]  # lists nothing: pyqtgraph's copy copies nothing
    block_cuda = "cuda.bindings" not in sys.modules  # once loaded (torch imported first), pyqtgraph costs nothing more
    if block_cuda:
        sys.modules["cuda.bindings"] = None  # type: ignore[assignment]  # "from cuda.bindings import ..." -> ImportError
    try:
        import pyqtgraph  # noqa: F401
    finally:
        if block_cuda and sys.modules.get("cuda.bindings", 0) is None:
            del sys.modules["cuda.bindings"]
        for m, src in sources.items():
            if listings[m] is None:
                del src.__dir__
            else:
                src.__dir__ = listings[m]  # type: ignore[attr-defined]


_answer_pyside_use_from_the_bytes()
_import_pyqtgraph()
