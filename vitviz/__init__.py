"""vitviz: see what a Vision Transformer looks at.

The public API here is Qt-free and imported lazily (``import vitviz`` stays cheap)::

    import vitviz
    model = vitviz.load_checkpoint("vit.safetensors")      # or vitviz.pretrained("vit_b_16"), vitviz.create_model(...)
    from vitviz.capture import capture
    cap = capture(model, batch, target=285)                 # attentions [L,B,H,N,N], tokens, grads
    r = vitviz.analysis.attention_rollout(cap.attentions[:, 0], grid=cap.grid, num_prefix_tokens=cap.num_prefix_tokens)
    vitviz.show(my_own_vit, ["cat.png"])                   # the window on any ViT module (timm, HF, hand-written)
    vitviz.show(dino, ["a.png", "b.png"], target=lambda out: out[7])      # explain any scalar of the output

In a notebook kernel, or where no display can show the window, ``vitviz.show`` returns the notebook viewer
(:class:`vitviz.notebook.Viewer`, the ``notebook`` extra) instead.

The GUI lives in ``vitviz.gui`` (the only package that imports Qt).
"""

from __future__ import annotations

import importlib
import time
from typing import Any

__version__ = "0.1.0"
_T0 = time.perf_counter()  # start-up timing (VITVIZ_STARTUP_LOG)

_LAZY = {
    "ViT": "vitviz.model", "ViTConfig": "vitviz.model", "ModelSpec": "vitviz.model", "create_model": "vitviz.model",
    "list_models": "vitviz.model", "load_checkpoint": "vitviz.model", "save_checkpoint": "vitviz.model",
    "load_model": "vitviz.model", "pretrained": "vitviz.model", "CheckpointError": "vitviz.model",
    "Capture": "vitviz.capture", "CaptureError": "vitviz.capture",
    "load_image": "vitviz.imaging", "ImageError": "vitviz.imaging", "Preprocess": "vitviz.model.preprocess",
    "Pipeline": "vitviz.pipeline", "InferenceResult": "vitviz.pipeline",
    "show": "vitviz.gui.in_memory", "AdaptedModel": "vitviz.capture.foreign",
    "ClassTarget": "vitviz.capture.targets", "SimilarityTarget": "vitviz.capture.targets",
    "CallableTarget": "vitviz.capture.targets", "TargetError": "vitviz.capture.targets",
    "reference_target": "vitviz.pipeline", "vector_target": "vitviz.pipeline",
    "Text": "vitviz.capture.targets", "prompt_pipeline": "vitviz.pipeline",
    "NoDisplay": "vitviz._util.display", "display_problem": "vitviz._util.display",
}
_SUBMODULES = ("analysis", "capture", "model", "imaging", "demo", "document", "pipeline", "views", "render", "batch",
               "evaluate")

__all__ = ["__version__", *_LAZY, *_SUBMODULES]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name in _SUBMODULES:
        return importlib.import_module(f"vitviz.{name}")
    raise AttributeError(f"module 'vitviz' has no attribute {name!r}")
