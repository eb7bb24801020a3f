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
import re
from pathlib import Path
from typing import Any

from vitviz.model.sources import catalog
from vitviz.model.sources.name_errors import (
    ARCHITECTURES,
    LISTING,
    close_file,
    close_name,
    file_like,
    name_error,
    path_like,
)
from vitviz.resources import default_model_path

PREFIXES = ("file:", "pretrained:", "hub:", "random:")
_PY_PREFIX = re.compile(r"^(?P<path>.+\.py):(?P<name>.*)$", re.DOTALL)
_USER_REF = re.compile(r"^(?P<path>.+\.py):(?P<name>[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*)$")


def parse_user_ref(text: str | os.PathLike[str]) -> tuple[str, str] | None:
    """``("path/to/file.py", "ClassName")`` for the user's own model class ``"path/to/file.py:ClassName"``
    (:mod:`vitviz.model.sources.user_module`), else None."""
    m = _USER_REF.match(os.fspath(text))
    return (m.group("path"), m.group("name")) if m else None


def parse_model_ref(text: str | os.PathLike[str]) -> str:
    """``"demo"``, ``"file:/abs/path"``, ``"pretrained:NAME"``, ``"hub:OWNER/NAME"`` or ``"random:NAME"`` for what
    the user typed. In order: a reference as such, ``demo``, an existing path, a torchvision name, a curated Hub key,
    an architecture name (random weights), a Hub id (``timm/...``, ``hf-hub:...``, ``owner/name``).

    Raises:
        ModelNameError: none of these; one short line naming the text and why it is no model (no such file; not a
            known name; an id that cannot exist), with a "did you mean" when a known name is close.
    """
    torchvision = catalog.TORCHVISION_VITS  # (torch_hub.PRETRAINED's rows, without importing torch before the window)
    text = os.fspath(text)
    if not text.strip():
        raise name_error(text, "no model name")
    if text.startswith(("pretrained:", "random:")):  # a named reference: the name must exist (said before any window)
        kind, name = text.split(":", 1)
        from vitviz.model.variants import list_models

        known = list(torchvision) if kind == "pretrained" else list_models()
        if kind == "pretrained" and name not in known:  # a row added to the registry at run time (imports torch)
            from vitviz.model.sources.torch_hub import PRETRAINED

            known = list(PRETRAINED)
        if name not in known:
            what = "torchvision weights" if kind == "pretrained" else "architecture (random weights)"
            raise name_error(text, f"unknown {what}" if name else f"no name after '{kind}:'", close_name(name, known),
                             listing=LISTING if kind == "pretrained" else ARCHITECTURES)
        return text
    if text.startswith("hub:"):  # the repository id must at least be one
        from vitviz.model.sources.hub import not_an_id, repo_id_problem

        problem = repo_id_problem(text[4:])
        if problem is not None:
            raise not_an_id(text, problem.replace("the prefix", "'hub:'"), "hub:OWNER/NAME",
                            text[4:].strip() if text[4:].strip() in catalog.HUB_BY_KEY else None)
        return text
    if text.startswith("file:") and not text[5:].strip():  # (not the working directory: a missing file is said by
        raise name_error(text, "no path after 'file:'", listing=None)  # load_checkpoint, naming it)
    if text == "demo" or text.startswith(PREFIXES):
        return text
    path = _existing(text)
    if path is not None:
        return f"file:{path.resolve()}"
    if text in torchvision:
        return f"pretrained:{text}"
    if text in catalog.HUB_BY_KEY:
        return catalog.HUB_BY_KEY[text].ref
    from vitviz.model.sources.hub import hub_repo, repo_id_problem  # (these import torch)
    from vitviz.model.sources.torch_hub import PRETRAINED
    from vitviz.model.variants import list_models

    if text in PRETRAINED:  # a row added to the registry at run time
        return f"pretrained:{text}"
    if text in list_models():
        return f"random:{text}"
    user = parse_user_ref(text)
    if user is not None:  # the user's own class: --model only (it needs --weights and --init)
        if _existing(user[0]) is None:
            raise name_error(text, f"no such file {user[0]}", close_file(user[0]), listing=None)
        raise name_error(text, "your own model class opens with 'vitviz --model FILE.py:CLASS' or "
                               "vitviz.Pipeline.open, not here", listing=None)
    own = _PY_PREFIX.match(text)  # FILE.py: followed by no class, or by no Python name
    if own is not None:
        if _existing(own["path"]) is None:
            raise name_error(text, f"no such file {own['path']}", close_file(own["path"]), listing=None)
        what = "no class name after ':'" if not own["name"].strip() else f"{own['name'][:40]!r} is not a class name"
        raise name_error(text, f"{what} (your own model class is named FILE.py:CLASS, e.g. {own['path']}:MyViT)",
                         listing=None)
    repo = hub_repo(text)
    if repo is not None:
        return f"hub:{repo}"
    if path_like(text):
        problem = repo_id_problem(text.strip()) if "/" in text and not file_like(text) else None
        nor = f", nor a Hugging Face Hub id ({problem})" if problem else ""
        raise name_error(text, f"no such file or directory{nor}", close_file(text))
    names = ["demo", *catalog.HUB_BY_KEY, *PRETRAINED, *list_models()]
    raise name_error(text, "no such file, and not a known model name", close_name(text, names))


def _existing(text: str) -> Path | None:
    """The path ``text`` names when something is there (``~`` expanded), else None (also for a name the system
    refuses: too long, a NUL byte, an unknown ``~user``)."""
    try:
        path = Path(text).expanduser()
        return path if path.exists() else None
    except (OSError, RuntimeError, ValueError):
        return None


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
        CheckpointError: a path that is not a usable checkpoint.
        ModelNameError: neither a path nor a known name (:func:`parse_model_ref`).
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
