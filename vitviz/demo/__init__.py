"""The bundled demo: a synthetic shapes dataset and a small ViT trained on it by vitviz itself. No Qt.

The shipped weights (``resources/demo/shapes_vit.safetensors``) were made with ``python -m vitviz.demo.train``;
the sample images in ``resources/samples/`` come from :func:`vitviz.demo.shapes.generate` (the ``"samples"`` stream).
This package is a face: the dataset lives in :mod:`vitviz.demo.shapes`, the bundled files' places in
:mod:`vitviz.resources`, and the demo model is opened by :func:`vitviz.model.sources.refs.load_demo_model`.
"""

from __future__ import annotations

from vitviz.demo.shapes import CLASSES, ShapeSample, generate, generate_batch, render
from vitviz.model.sources.refs import load_demo_model
from vitviz.resources import default_model_path, resources_dir, sample_images

__all__ = ["CLASSES", "ShapeSample", "default_model_path", "generate", "generate_batch", "load_demo_model",
           "render", "resources_dir", "sample_images"]
