"""The fence around the user's target function (a :class:`~vitviz.capture.targets.CallableTarget`): while it runs
inside a capture, the model it explains is read-only and cannot run again, so a function that changes the weights in
place, calls the model, starts a capture of its own or takes a gradient itself is one line naming it, and the model is
left as it was.

* :func:`guarding` (a capture, around the part that evaluates its target): names the model whose weights and
  buffers the target function must leave alone.
* :func:`call_guarded` (where the target function is called): runs it under a ``TorchFunctionMode`` that refuses, before
  they happen, in-place writes to the storage of the model's parameters and buffers (``p.mul_``, ``p.data.add_``,
  ``p[...] = ...``, ``out=p``, ``p.data = ...``, ``nn.init``) or of the output it was given, ``backward`` and
  ``autograd.grad``; a forward pre-hook refuses any call of the model's modules. Afterwards the parameters and
  buffers are compared with what they were (the same tensor objects, the same version counters): a module attribute
  replaced is put back; a change that got past the fence (its version counter moved) is reported with "reopen the
  model".
* :func:`weights_watched` (around a batch's calls of the target function): the weights compared by content, before
  and after, for the writes neither the fence nor a version counter sees (``p.data`` with torch functions disabled,
  a NumPy view of a weight); reported with "reopen the model" too.
* :func:`refuse_inside_target` (each capture's entry): a capture started from inside a target function is refused
  (the outer capture's hooks would record the second pass over the first).

A refusal raises :class:`TargetMisuse` from inside the function; one the function catches is raised again when it
returns. No Qt.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from itertools import chain
from typing import Any

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

__all__ = ["TargetMisuse", "call_guarded", "guarding", "refuse_inside_target", "weights_watched"]

# in-place dunders (``p[...] = v``, ``p += v``, ...) and descriptor writes (``p.data = t``, ``p.requires_grad = b``)
_INPLACE_DUNDERS = frozenset({"__setitem__", "__set__", "__iadd__", "__isub__", "__imul__", "__itruediv__",
                              "__ifloordiv__", "__imod__", "__ipow__", "__iand__", "__ior__", "__ixor__",
                              "__ilshift__", "__irshift__", "__imatmul__"})
_GRADIENTS = frozenset({"backward", "grad"})
OUTPUT = "the model's output"

_MODEL: ContextVar[nn.Module | None] = ContextVar("vitviz_guarded_model", default=None)
_RUNNING: ContextVar[Any] = ContextVar("vitviz_running_target", default=None)


class TargetMisuse(ValueError):
    """A target function that changes the model, runs it again, starts a capture or takes a gradient itself."""


@contextmanager
def guarding(model: nn.Module) -> Iterator[None]:
    """Within the block, a target function called through :func:`call_guarded` must leave ``model`` alone."""
    token = _MODEL.set(model)
    try:
        yield
    finally:
        _MODEL.reset(token)


def refuse_inside_target(what: str = "a capture") -> None:
    """Raise :class:`TargetMisuse` when called from inside a target function (a capture within a capture)."""
    fence = _RUNNING.get()
    if fence is not None:
        fence.refuse(f"starts {what} inside itself (Pipeline.run, vitviz.capture, ...): a target is a function of "
                     "the output it is given; compute any reference before the run")


def _storage(t: Any) -> int:
    try:
        return int(t.untyped_storage().data_ptr()) if isinstance(t, torch.Tensor) else 0
    except (RuntimeError, NotImplementedError):  # a tensor without storage (sparse, meta, functional)
        return 0


class _Fence(TorchFunctionMode):
    def __init__(self, name: str, protected: dict[int, str]):
        super().__init__()
        self.name = name
        self.protected = protected
        self.refused: list[str] = []

    def refuse(self, why: str) -> None:
        message = f"target function {self.name} {why}"
        self.refused.append(message)
        raise TargetMisuse(message)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in _GRADIENTS and func in (torch.Tensor.backward, torch.autograd.grad):
            self.refuse(f"takes a gradient itself ({name}): return the score, and vitviz takes its gradient")
        written = []
        if (name.endswith("_") and not name.startswith("_")) or name in _INPLACE_DUNDERS:
            written.append(args[0] if args else next(iter(kwargs.values()), None))  # (nn.init passes tensor=)
        out = kwargs.get("out")
        written.extend(out if isinstance(out, (tuple, list)) else [out])
        for t in written:
            what = self.protected.get(_storage(t))
            if what is not None:
                harm = ("the scores shown would not be the model's" if what == OUTPUT else
                        "the maps would explain another model")
                self.refuse(f"changes {what} in place ({name}): {harm}; a target must only read the output (nothing "
                            "was changed)")
        return func(*args, **kwargs)


def _tensors(model: nn.Module) -> list[tuple[str, torch.Tensor, int]]:
    return [(n, t, t._version) for n, t in chain(model.named_parameters(remove_duplicate=False),
                                                 model.named_buffers(remove_duplicate=False))]


def _put_back(model: nn.Module, before: list[tuple[str, torch.Tensor, int]]) -> tuple[list[str], list[str]]:
    """``(replaced and put back, changed in place)`` among the model's tensors since ``before``."""
    now = {n: t for n, t, _ in _tensors(model)}
    replaced, changed = [], []
    for name, t, version in before:
        if now.get(name) is not t:
            path, _, attr = name.rpartition(".")
            setattr(model.get_submodule(path), attr, t)
            replaced.append(name)
        elif t._version != version:
            changed.append(name)
    return replaced, changed


_BITS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _fingerprints(model: nn.Module) -> dict[str, int]:
    """Each parameter's and buffer's elements summed as integers of their width (their bit patterns, exact and
    wrapping), so that a change of any one element changes its sum (changes that cancel exactly, such as a
    permutation, are not seen). Reads every weight once: about 70 ms for ViT-B's 86 M on two CPU cores."""
    out = {}
    for name, t in chain(model.named_parameters(remove_duplicate=False), model.named_buffers(remove_duplicate=False)):
        bits = _BITS.get(t.element_size())
        if bits is None or t.is_meta or t.layout != torch.strided:
            continue
        try:
            out[name] = int(t.detach().view(bits).sum(dtype=torch.int64))
        except (RuntimeError, TypeError):  # a tensor whose bits cannot be read as integers (quantised ...)
            continue
    return out


@contextmanager
def weights_watched(name: str) -> Iterator[None]:
    """Around the calls of target function ``name`` on one batch (each through :func:`call_guarded`): the model of
    the enclosing :func:`guarding` block is compared with what it was by the content of its weights and buffers
    (:func:`_fingerprints`, once before and once after the batch), which sees what the fence and the version counters
    cannot: writes through ``p.data`` with torch functions disabled (``.data`` has a version counter of its own) or
    through a NumPy view (``p.data.numpy()[...] = v``).

    Raises:
        TargetMisuse: a weight or buffer changed ("reopen the model": there is no copy to put back).
    """
    model = _MODEL.get()
    before = _fingerprints(model) if model is not None else {}
    yield
    if model is None:
        return
    after = _fingerprints(model)
    changed = [n for n, v in before.items() if after.get(n, v) != v]
    if changed:
        raise TargetMisuse(f"target function {name} changed the model's {_short(changed)} in place: the maps would "
                           "explain another model, and its weights are no longer those opened: reopen the model")


def _short(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def call_guarded(name: str, fn: Callable[[Any], Any], value: torch.Tensor, output: torch.Tensor) -> Any:
    """``fn(value)`` with the model of the enclosing :func:`guarding` block (if any) and ``output`` (the batch's output
    ``value`` is a part of) fenced off.

    Raises:
        TargetMisuse: the function changed the model's weights or buffers or the output in place, called the model,
            started a capture or took a gradient (one line naming the function and what it did).
    """
    model = _MODEL.get()
    protected = {_storage(output): OUTPUT}
    before: list[tuple[str, torch.Tensor, int]] = []
    modules: set[int] = set()
    if model is not None:
        before = _tensors(model)
        protected.update({_storage(t): f"the model's {n}" for n, t, _ in before})
        modules = {id(m) for m in model.modules()}
    protected.pop(0, None)
    fence = _Fence(name, protected)

    def no_second_pass(module: nn.Module, args: Any) -> None:
        if _RUNNING.get() is fence and id(module) in modules:
            fence.refuse("calls the model again (a second forward pass inside the capture would be recorded over the "
                         "one being explained): compute what it needs from the output it is given")

    token = _RUNNING.set(fence)
    hook = nn.modules.module.register_module_forward_pre_hook(no_second_pass) if modules else None
    try:
        with fence:
            y = fn(value)
    except Exception:
        if fence.refused:  # ours, or another error after the function caught ours
            raise TargetMisuse(fence.refused[0]) from None
        raise
    finally:
        _RUNNING.reset(token)
        if hook is not None:
            hook.remove()
    if fence.refused:  # the function caught the refusal and went on
        raise TargetMisuse(fence.refused[0])
    if model is not None:
        replaced, changed = _put_back(model, before)
        if replaced:
            raise TargetMisuse(f"target function {name} replaced the model's {_short(replaced)}: the maps would "
                               "explain another model (put back as they were)")
        if changed:
            raise TargetMisuse(f"target function {name} changed the model's {_short(changed)} in place: the maps "
                               "would explain another model, and its weights are no longer those opened: reopen "
                               "the model")
    return y
