"""The user's own model class: ``vitviz --model path/to/file.py:ClassName --weights ckpt.pth --init JSON``.

:func:`load_user_module` imports the class from the user's file (running that file: their code, at their request),
builds it with the ``--init`` arguments and loads ``--weights`` strictly. What it gives is the bare module; making it
capturable (:class:`vitviz.capture.foreign.AdaptedModel`) happens where a model is opened
(:func:`vitviz.pipeline.open_adapted`). No Qt.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torch import nn

from vitviz.model.checkpoints.common import names
from vitviz.model.checkpoints.reading import read_raw
from vitviz.model.sources.name_errors import close_file, close_name
from vitviz.model.sources.refs import parse_user_ref

CLASSES_SHOWN = 20  # the nn.Module classes of the user's file named when the one asked for is not there


@dataclass(frozen=True)
class UserModule:
    """What :func:`load_user_module` built.

    Attributes:
        module: the user's ``nn.Module``, in eval mode.
        name: a display name: ``"ClassName (weights file name)"``, or ``"ClassName"`` without weights.
        path: the user's file, as given (``~`` expanded).
        note: a note for the user (random weights), or None.
    """

    module: nn.Module
    name: str
    path: str
    note: str | None = None


def _parse_init(init: str | Mapping[str, Any] | Sequence[Any] | None) -> tuple[list[Any], dict[str, Any]]:
    if init is None:
        return [], {}
    if isinstance(init, Mapping):
        return [], dict(init)
    if not isinstance(init, str):
        return list(init), {}
    text = init
    p = Path(init).expanduser()
    if not init.lstrip().startswith(("{", "[")) and p.suffix.lower() == ".json":
        try:
            text = p.read_text(encoding="utf-8")
        except OSError as e:
            raise ValueError(f"--init {init}: cannot read the file ({e.strerror or e})") from None
    try:
        value = json.loads(text)
    except ValueError as e:
        raise ValueError(f"--init {init!r}: not valid JSON ({e}); give the constructor's arguments as an object, "
                         "e.g. '{\"img_size\": 32, \"num_classes\": 10}'") from None
    if isinstance(value, dict):
        return [], value
    if isinstance(value, list):
        return value, {}
    raise ValueError(f"--init {init!r}: expected a JSON object of keyword arguments (or a list of positional "
                     f"ones), got {type(value).__name__}")


def load_user_module(ref: str, *, weights: str | os.PathLike[str] | None = None,
                     init: str | Mapping[str, Any] | Sequence[Any] | None = None) -> UserModule:
    """Import ``ClassName`` from the user's ``file.py`` (running that file: the user's own code, at their request),
    build it with ``init`` and load ``weights`` (``torch.load(weights_only=True)`` or safetensors).

    Args:
        ref: ``"path/to/file.py:ClassName"`` (a class or a function returning an ``nn.Module``).
        weights: a state dict file for the module (strict: every key and shape must match).
        init: the constructor's arguments: a JSON object (keyword) or list (positional), as text or a ``.json`` file.

    Returns:
        A :class:`UserModule`: the module in eval mode, its display name, the file and a note for the user (random
        weights) or None.

    Raises:
        ValueError: file or class missing, init JSON bad, construction failed, weights mismatched (the message names
            the file and the problem).
    """
    parsed = parse_user_ref(ref)
    if parsed is None:
        raise ValueError(f"--model {ref}: expected path/to/file.py:ClassName")
    path_text, cls_name = parsed
    path = Path(os.path.expanduser(path_text))  # (os.path's: an unknown ~user stays as typed)
    try:
        exists, is_file = path.exists(), path.is_file()
    except OSError as e:  # a name the system refuses (too long)
        raise ValueError(f"{path_text}: {e.strerror or e}") from None
    if not is_file:
        close = None if exists else close_file(path_text)
        raise ValueError(f"{path}: not a file" if exists else
                         f"{path}: no such file" + (f"; did you mean {close}?" if close else ""))
    args, kwargs = _parse_init(init)
    module_name = f"_vitviz_user_{abs(hash(str(path.resolve())))}"
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:  # pragma: no cover - a .py file always has a loader
        raise ValueError(f"{path}: cannot be imported as a Python module")
    mod = importlib.util.module_from_spec(spec)
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)  # the user's file may import its neighbours
    sys.modules[module_name] = mod
    try:
        spec.loader.exec_module(mod)
    except Exception as e:
        sys.modules.pop(module_name, None)
        raise ValueError(f"{path}: importing it failed: {type(e).__name__}: {e}") from e
    finally:
        try:
            sys.path.remove(folder)
        except ValueError:  # pragma: no cover - the user's code removed it
            pass
    obj: Any = mod
    for part in cls_name.split("."):
        if not hasattr(obj, part):
            have = sorted(n for n, v in vars(mod).items() if isinstance(v, type) and issubclass(v, nn.Module)
                          and v.__module__ == module_name)
            close = close_name(cls_name, have)
            if close is not None:
                raise ValueError(f"{path}: defines no {cls_name!r}; did you mean {close}?")
            shown = ", ".join(have[:CLASSES_SHOWN]) + (f" and {len(have) - CLASSES_SHOWN} more"
                                                       if len(have) > CLASSES_SHOWN else "")
            raise ValueError(f"{path}: defines no {cls_name!r}" + (f"; its nn.Module classes: {shown}" if have else ""))
        obj = getattr(obj, part)
    if not callable(obj):
        raise ValueError(f"{path}: {cls_name} is not a class or function")
    try:
        module = obj(*args, **kwargs)
    except Exception as e:
        raise ValueError(f"{path}: {cls_name}({_call_text(args, kwargs)}) failed: {type(e).__name__}: {e}") from e
    if not isinstance(module, nn.Module):
        raise ValueError(f"{path}: {cls_name}(...) returned a {type(module).__name__}, not a torch.nn.Module")
    note = None
    if weights is not None:
        load_user_weights(module, weights)
        display = f"{cls_name} ({Path(weights).name})"
    else:
        note = "Randomly initialised weights (no --weights): the maps show no learned structure."
        display = cls_name
    module.eval()
    return UserModule(module=module, name=display, path=str(path), note=note)


def _call_text(args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
    parts = [repr(a) for a in args] + [f"{k}={v!r}" for k, v in kwargs.items()]
    text = ", ".join(parts)
    return text if len(text) <= 120 else text[:117] + "..."


def load_user_weights(module: nn.Module, weights: str | os.PathLike[str]) -> None:
    """Load a state dict file into ``module`` strictly; every problem names the file and the keys."""
    p = Path(weights).expanduser()
    if not p.exists():
        raise ValueError(f"{p}: no such file")
    raw = read_raw(p)  # torch.load(weights_only=True) / safetensors; CheckpointError names the file
    state = raw.tensors
    target = module.state_dict()
    missing = [k for k in target if k not in state]
    unexpected = [k for k in state if k not in target]
    if missing or unexpected:
        parts = ([f"missing keys {names(missing)}"] if missing else []) + (
            [f"unexpected keys {names(unexpected)}"] if unexpected else [])
        raise ValueError(f"{p}: the weights do not match {type(module).__name__}: " + "; ".join(parts)
                         + " (was it saved from this class, with the same --init?)")
    bad = [(k, tuple(state[k].shape), tuple(v.shape)) for k, v in target.items()
           if tuple(state[k].shape) != tuple(v.shape)]
    if bad:
        shown = "; ".join(f"{k}: file {a}, model {b}" for k, a, b in bad[:4])
        raise ValueError(f"{p}: the weights do not match {type(module).__name__}: shape mismatch for {shown}"
                         + (f" and {len(bad) - 4} more" if len(bad) > 4 else "") + " (the same --init as in training?)")
    module.load_state_dict(state, strict=True)

