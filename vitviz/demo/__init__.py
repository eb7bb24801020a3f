"""The bundled demo: a synthetic shapes dataset and a small ViT trained on it by vitviz itself. No Qt.

The shipped weights (``resources/demo/shapes_vit.safetensors``) were made with ``python -m vitviz.demo.train``;
the sample images in ``resources/samples/`` come from :func:`vitviz.demo.shapes.generate` (the ``"samples"`` stream).
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

import vitviz
from vitviz.demo.shapes import CLASSES, ShapeSample, generate, generate_batch, render

__all__ = ["CLASSES", "ShapeSample", "default_model_path", "generate", "generate_batch", "load_demo_model",
           "render", "resources_dir", "sample_images"]


def _installed_resources() -> Path | None:
    """``vitviz/_resources`` of an installed package (wheel, ``pip install .``), found with importlib.resources."""
    try:
        root = importlib.resources.files("vitviz") / "_resources"
    except (ModuleNotFoundError, TypeError):  # pragma: no cover - vitviz is always importable here
        return None
    # a real folder only: the files are passed to code that opens paths (safetensors, PIL, the GUI)
    if isinstance(root, Path) and root.is_dir():
        return root
    return None


def resources_dir() -> Path:
    """The folder with the demo weights (``demo/``) and the sample images (``samples/``).

    An installed package (wheel or ``pip install .``) carries them as package data in ``vitviz/_resources``; a
    source checkout or an editable install uses the repository's top-level ``resources/`` folder (next to the
    ``vitviz`` package), which is also where ``python -m vitviz.demo.train`` / ``.samples`` write by default.
    """
    installed = _installed_resources()
    if installed is not None:
        return installed
    return Path(vitviz.__file__).resolve().parent.parent / "resources"


def default_model_path() -> Path:
    """Where the shipped demo weights live: ``resources/demo/shapes_vit.safetensors``."""
    return resources_dir() / "demo" / "shapes_vit.safetensors"


def load_demo_model(path: str | Path | None = None):
    """Load the demo model (eval mode) with its spec: labels = :data:`CLASSES`, 112 px preprocessing.

    Raises:
        FileNotFoundError: when the weights file is missing (naming the path).
    """
    from vitviz.model import load_checkpoint

    p = Path(path) if path is not None else default_model_path()
    if not p.is_file():
        raise FileNotFoundError(f"demo model not found: {p} (retrain it with `python -m vitviz.demo.train`)")
    model = load_checkpoint(p)
    model.eval()
    return model


def sample_images() -> list[Path]:
    """The bundled sample images (``resources/samples/*.png``), sorted by name."""
    d = resources_dir() / "samples"
    return sorted(d.glob("*.png")) if d.is_dir() else []
