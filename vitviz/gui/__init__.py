"""The desktop app (PySide6 + pyqtgraph): the only package that imports Qt.

pyqtgraph is imported here first, without cuda-python: ``import pyqtgraph`` loads its ``RawImageWidget``, which
imports ``cuda.bindings.runtime`` when it is installed (torch's CUDA wheels install it) for a CUDA-OpenGL path vitviz
never uses (it draws from numpy arrays): 60-70 ms of the window's start-up. The block lasts for that import only; torch
and anything else import cuda-python as usual afterwards.
"""

import sys


def _import_pyqtgraph_without_cuda_python() -> None:
    if "pyqtgraph" in sys.modules or "cuda.bindings" in sys.modules:
        return
    sys.modules["cuda.bindings"] = None  # type: ignore[assignment]  # "from cuda.bindings import ..." -> ImportError
    try:
        import pyqtgraph  # noqa: F401
    finally:
        if sys.modules.get("cuda.bindings", 0) is None:
            del sys.modules["cuda.bindings"]


_import_pyqtgraph_without_cuda_python()
