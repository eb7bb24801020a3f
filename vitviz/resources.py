"""Where vitviz's bundled files are: the demo weights, the sample images, the ImageNet labels. No torch, no Qt.

The bottom layer: the model layer (the demo reference, ImageNet labels, what counts as a photo) and the demo's tools
(:mod:`vitviz.demo`) both read these, so they live below both.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path

# the bundled demo model's classes, in output order (the shapes vitviz.demo.shapes draws)
DEMO_CLASSES: tuple[str, ...] = ("circle", "square", "triangle", "star", "cross", "ring", "hexagon", "heart")


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
    return Path(__file__).resolve().parent.parent / "resources"


def default_model_path() -> Path:
    """Where the shipped demo weights live: ``resources/demo/shapes_vit.safetensors``."""
    return resources_dir() / "demo" / "shapes_vit.safetensors"


def sample_images() -> list[Path]:
    """The bundled sample images (``resources/samples/*.png``), sorted by name."""
    d = resources_dir() / "samples"
    return sorted(d.glob("*.png")) if d.is_dir() else []
