"""The desktop app (PySide6 + pyqtgraph): the only package that imports Qt.

Two things are done here, before anything else of the app is imported, for the window's start-up and the first
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
"""

import sys

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


def _import_pyqtgraph_without_cuda_python() -> None:
    if "pyqtgraph" in sys.modules or "cuda.bindings" in sys.modules:
        return
    sys.modules["cuda.bindings"] = None  # type: ignore[assignment]  # "from cuda.bindings import ..." -> ImportError
    try:
        import pyqtgraph  # noqa: F401
    finally:
        if sys.modules.get("cuda.bindings", 0) is None:
            del sys.modules["cuda.bindings"]


_answer_pyside_use_from_the_bytes()
_import_pyqtgraph_without_cuda_python()
