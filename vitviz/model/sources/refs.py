"""What a user types to name a model, turned into a model: the one parser for the CLI, the window and ``--model``.

No Qt here. A *model reference* is a string, stored as such in the window's settings:

- ``"demo"``: the bundled shapes model;
- ``"file:PATH"``: a checkpoint file or folder (:func:`vitviz.model.load_checkpoint`);
- ``"pretrained:NAME"``: torchvision's weights, downloaded once (:data:`vitviz.model.sources.torch_hub.PRETRAINED`);
- ``"hub:OWNER/NAME"``: a Hugging Face Hub repository (timm or Transformers), downloaded once into the Hub's cache
  (:mod:`vitviz.model.sources.hub`; curated keys such as ``dino-s8``, ``timm/...``, ``hf-hub:...`` and ids such as
  ``facebook/dinov2-small`` all become this);
- ``"random:NAME"``: a registered architecture with random weights (:func:`vitviz.model.list_models`).

:func:`parse_model_ref` turns free text into a reference (an existing path wins over a name; no network);
:func:`open_model` builds the model it names.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from vitviz.model.sources import catalog
from vitviz.resources import default_model_path

PREFIXES = ("file:", "pretrained:", "hub:", "random:")


def parse_model_ref(text: str | os.PathLike[str]) -> str:
    """``"demo"``, ``"file:/abs/path"``, ``"pretrained:NAME"``, ``"hub:OWNER/NAME"`` or ``"random:NAME"`` for what
    the user typed. In order: a reference as such, ``demo``, an existing path, a torchvision name, a curated Hub key,
    an architecture name (random weights), a Hub id (``timm/...``, ``hf-hub:...``, ``owner/name``).

    Raises:
        CheckpointError: none of these (the message lists the names and the forms).
    """
    from vitviz.model.checkpoints import CheckpointError
    from vitviz.model.sources.torch_hub import PRETRAINED

    text = os.fspath(text)
    if text.startswith(("pretrained:", "random:")):  # a named reference: the name must exist (said before any window)
        kind, name = text.split(":", 1)
        from vitviz.model.variants import list_models

        known = list(PRETRAINED) if kind == "pretrained" else list_models()
        if name not in known:
            raise CheckpointError(f"{text}: unknown {'pretrained weights' if kind == 'pretrained' else 'architecture'}"
                                  f" {name!r}; known: {', '.join(known)}")
        return text
    if text.startswith("hub:"):  # the repository id must at least be one
        from vitviz.model.sources.hub import hub_repo

        repo = hub_repo(text[4:])
        if repo is None or repo != text[4:]:
            raise CheckpointError(f"{text}: not a Hugging Face Hub repository id (expected hub:OWNER/NAME)")
        return text
    if text == "demo" or text.startswith(PREFIXES):
        return text
    path = Path(text).expanduser()
    if path.exists():
        return f"file:{path.resolve()}"
    if text in PRETRAINED:
        return f"pretrained:{text}"
    from vitviz.model.sources.hub import hub_repo
    from vitviz.model.variants import list_models

    if text in catalog.HUB_BY_KEY:
        return catalog.HUB_BY_KEY[text].ref
    if text in list_models():
        return f"random:{text}"
    repo = hub_repo(text)
    if repo is not None:
        return f"hub:{repo}"
    raise CheckpointError(f"{text}: no such file or directory, and not a pretrained name: a curated model "
                          f"({', '.join(catalog.HUB_BY_KEY)}), a torchvision name ({', '.join(PRETRAINED)}), a Hugging "
                          f"Face Hub id (timm/MODEL.TAG, hf-hub:OWNER/NAME or OWNER/NAME, e.g. facebook/dinov2-small), "
                          f"'demo' (the bundled model) or an architecture for random weights "
                          f"({', '.join(list_models())}); 'vitviz models' lists the named ones")


def describe_ref(ref: str) -> str:
    """A short name of a reference for status text and error titles."""
    if ref == "demo":
        return "bundled demo model"
    if ref.startswith("hub:"):
        return catalog.hub_title(ref[4:])
    return ref.split(":", 1)[1] if ":" in ref else ref


def load_demo_model(path: str | os.PathLike[str] | None = None):
    """Load the demo model (eval mode) with its spec: labels = :data:`vitviz.resources.DEMO_CLASSES`, 112 px
    preprocessing.

    Raises:
        FileNotFoundError: when the weights file is missing (naming the path).
    """
    from vitviz.model.checkpoints import load_checkpoint

    p = Path(path) if path is not None else default_model_path()
    if not p.is_file():
        raise FileNotFoundError(f"demo model not found: {p} (retrain it with `python -m vitviz.demo.train`)")
    model = load_checkpoint(p)
    model.eval()
    return model


def load_model(source: str | os.PathLike[str], *, progress: Any = None, show_bar: bool = True, **kwargs: Any):
    """Open what a user typed: a checkpoint file or directory, a torchvision name
    (:data:`vitviz.model.sources.torch_hub.PRETRAINED`), ``demo``, or an architecture name (random weights). An
    existing path always wins over a name. ``kwargs`` (``num_classes``, ``img_size``, ``num_heads``, ``preprocess``,
    ``labels``) apply to files only.

    The same parser serves the CLI, the window and ``--model`` (:func:`parse_model_ref`).

    Raises:
        CheckpointError: a path that is not a usable checkpoint, or neither a path nor a known name.
        PretrainedError: a known name whose weights cannot be downloaded or read.
    """
    return open_model(parse_model_ref(source), progress=progress, show_bar=show_bar, **kwargs)[0]


def open_model(ref: str, *, progress: Any = None, show_bar: bool = True, **load_kwargs: Any):
    """Build the model ``ref`` names; returns ``(model, note)`` where ``note`` is a warning for the user or None.

    Args:
        ref: a model reference (see :func:`parse_model_ref`).
        progress: ``progress(done, total) -> bool | None`` for downloads (False cancels).
        show_bar: a terminal progress bar for downloads.
        load_kwargs: ``num_heads``, ``num_classes``, ``img_size``, ``preprocess``, ``labels``: for checkpoint files.

    Raises:
        CheckpointError, PretrainedError, ValueError: naming the file or model and the cause.
    """
    given = sorted(k for k, v in load_kwargs.items() if v is not None)
    if given and not ref.startswith("file:"):
        raise ValueError(f"options {given} apply to checkpoint files, not to {describe_ref(ref)!r}")
    if ref == "demo":
        try:
            return load_demo_model(), None
        except (ImportError, FileNotFoundError) as e:
            from vitviz.model.variants import create_model
            m = create_model("vit_tiny_patch16_224", num_classes=10, depth=4)
            return m, f"The bundled demo model is not available ({e}); showing a randomly initialised ViT."
    kind, _, value = ref.partition(":")
    if kind == "file":
        from vitviz.model.checkpoints import load_checkpoint
        return load_checkpoint(value, **{k: v for k, v in load_kwargs.items() if v is not None}), None
    if kind == "pretrained":
        from vitviz.model.sources.torch_hub import pretrained
        return pretrained(value, progress=progress, show_bar=show_bar), None
    if kind == "hub":
        from vitviz.model.sources.hub import load_hub
        return load_hub(value, progress=progress, show_bar=show_bar), None
    if kind == "random":
        from vitviz.model.variants import create_model
        return create_model(value), "Randomly initialised weights: the maps show no learned structure."
    raise ValueError(f"unknown model reference {ref!r}: expected demo, file:PATH, pretrained:NAME, hub:OWNER/NAME or "
                     "random:NAME")
