"""``vitviz.show(model, images)``: the window on a model that lives in memory (a script, IPython or a notebook).

The model may be a :class:`vitviz.model.ViT` or any other ViT module (:class:`vitviz.capture.foreign.AdaptedModel`
finds its attention). Qt (and torch) are imported only when the window opens.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from vitviz import imaging
from vitviz.model.sources.refs import parse_model_ref

__all__ = ["show"]

# windows opened without blocking -> the event filter that forgets each when it closes (keeps both alive until then)
_OPEN: dict[Any, Any] = {}


def _as_images(images: Any) -> list[tuple[str, Any]]:
    """``[(name, PIL image or None for a file)]`` from paths, PIL images, uint8 arrays ``[H, W(, C)]`` or tensors
    ``[C, H, W]`` (floats in 0..1 or uint8)."""
    if images is None:
        return []
    if isinstance(images, (str, os.PathLike, Image.Image, np.ndarray)) or hasattr(images, "detach"):
        images = [images]
    out: list[tuple[str, Any]] = []
    for i, item in enumerate(images, start=1):
        if isinstance(item, (str, os.PathLike)):
            p = Path(item).expanduser()
            if not p.is_file():
                raise ValueError(f"{p}: no such image file")
            out.append((str(p), None))
            continue
        name = f"image {i}"
        if isinstance(item, Image.Image):
            fn = getattr(item, "filename", "")
            name = f"{Path(fn).name} ({i})" if fn else name
            out.append((name, imaging.to_rgb(item)))
            continue
        if hasattr(item, "detach"):  # a torch tensor [C, H, W] (or [H, W])
            t = item.detach().cpu()
            if t.ndim == 3 and t.shape[0] in (1, 3, 4):
                t = t.permute(1, 2, 0)
            arr = (t.double() if t.is_floating_point() else t).numpy()  # bfloat16 has no numpy dtype
            if arr.dtype != np.uint8:
                arr = np.clip(np.round(arr.astype(np.float64) * 255.0), 0, 255).astype(np.uint8)
            item = arr.squeeze(-1) if arr.ndim == 3 and arr.shape[-1] == 1 else arr
        if isinstance(item, np.ndarray):
            if item.dtype != np.uint8:
                raise ValueError(f"{name}: an image array must be uint8 [H, W] or [H, W, 3], got dtype {item.dtype}")
            out.append((name, imaging.image_from_array(item, name).image))
            continue
        raise ValueError(f"{name}: expected an image file path, a PIL image, a uint8 array or a tensor, got "
                         f"{type(item).__name__}")
    return out


def _qt_loop_running() -> bool:
    """True when a Qt event loop already runs: IPython / Jupyter with ``%gui qt``, or inside a running Qt app."""
    try:
        from IPython import get_ipython  # type: ignore[import-not-found]
    except ImportError:
        ip = None
    else:
        ip = get_ipython()
    if ip is not None:
        loop = getattr(ip, "active_eventloop", None)  # terminal IPython
        if isinstance(loop, str) and loop.startswith("qt"):
            return True
        kloop = getattr(getattr(ip, "kernel", None), "eventloop", None)  # ipykernel
        if kloop is not None and "qt" in getattr(kloop, "__name__", "").lower():
            return True
    from PySide6.QtCore import QThread

    return QThread.currentThread().loopLevel() > 0


def _check_target(pipe: Any, target: Any, items: list[tuple[str, Any]]) -> Any:
    """``target`` as the window's standing target, checked before any window opens: a function of the output is
    called on the first image's output (one forward pass, with autograd on), so that one that raises, returns no
    tensor, no scalar or a value that does not depend on the output is one :class:`TargetError` naming it."""
    from vitviz.capture.targets import CallableTarget, TargetError, as_target, differentiable_scores
    from vitviz.document.target_choice import as_choice

    try:
        choice, made = as_choice(target)
    except ValueError as e:
        raise TargetError(f"vitviz.show(target=...): {e}") from None
    if choice.kind == "class":
        choice.build(pipe)  # a class the model has (TargetError naming the range), on a classifier
    if choice.kind == "text":
        return choice.build(pipe)  # the prompt encoded by the model's text tower (TargetError: none, why)
    t = made if made is not None else as_target(choice.fn) if choice.kind == "callable" else None
    if not isinstance(t, CallableTarget):
        return choice if made is None else made
    import torch

    name, pil = items[0] if items else (None, None)
    if pil is None:
        from vitviz.demo import sample_images

        pil = imaging.load_image(name if name is not None else sample_images()[0]).image
    x = pipe.prepare(pil).x[None].to(device=pipe.device, dtype=next(pipe.model.parameters()).dtype)
    with torch.enable_grad():
        out = pipe.model(x)
        out = out[0] if isinstance(out, (tuple, list)) else out
        differentiable_scores(t, out, None)  # TargetError: raises, not a scalar, not of the output
    return t


def _with_text(pipe: Any, model: Any, text: Any, text_tower: Any) -> Any:
    """The pipeline over the prompts ``text`` (checked before any window opens): the text tower given, else the one
    of the model's source (a model opened from a folder, a file or by name).

    Raises:
        TargetError: no prompts, an empty one, no text tower (a module handed over without ``text_tower``, a model
            whose source has none), one line naming it.
    """
    from vitviz.capture.targets import TargetError
    from vitviz.pipeline import prompt_pipeline

    if text_tower is not None:
        pipe.attach_text_tower(text_tower)
    elif pipe.source is None:
        source = getattr(getattr(model, "spec", None), "source_path", None)
        if source is None:
            raise TargetError("vitviz.show(text=...): this model was handed over as a module, so vitviz does not know "
                              "its text tower: pass text_tower=vitviz.model.text.open_text_tower(SOURCE), or give the "
                              "model's folder, file or name instead of the module")
        pipe.source = str(source)
    prompts = list(text) if not isinstance(text, str) else text
    try:
        return prompt_pipeline(pipe, prompts)
    except TargetError as e:
        raise TargetError(f"vitviz.show(text=...): {e}") from None
    except Exception as e:  # noqa: BLE001 - no text tower (why), a tokenizer file missing, another model's tower
        raise TargetError(f"vitviz.show(text=...): {str(e).strip().splitlines()[0]}") from None


def show(model: Any, images: Any = None, *, labels: Sequence[str] | None = None, preprocess: Any = None,
         target: Any = None, text: Any = None, text_tower: Any = None, block: bool | None = None,
         settings: Any = None, **adapter_options: Any) -> Any:
    """Open the vitviz window on an in-memory model.

    Args:
        model: a :class:`vitviz.model.ViT`, or any ViT ``nn.Module`` (timm, Hugging Face, ``nn.MultiheadAttention``
            based, hand-written; see :mod:`vitviz.capture.foreign`), used on its own device and precision; or a
            model's folder, file or name (opened on the CPU, as ``vitviz.open_model`` would).
        images: image files, PIL images, uint8 arrays ``[H, W, 3]`` or tensors ``[3, H, W]`` in 0..1 (one or a list;
            PageDown / PageUp step through them); none: the bundled samples.
        labels: class names in output order.
        preprocess: a :class:`vitviz.Preprocess`, ``"imagenet"`` or ``"inception"`` (default: the model's spec, or for
            other modules resize + centre crop to the input size with ImageNet mean and std).
        target: what the gradient views explain, for every image: a class index, a function of one image's output
            ``[K]`` returning a 0-d tensor (``lambda out: out[3] - out[5]``), or a target of
            :mod:`vitviz.capture.targets` (``vitviz.SimilarityTarget``, ``vitviz.reference_target(...)``); None:
            each image's top class. A function is tried on the first image before the window opens.
        text: text prompts for a CLIP or SigLIP image tower (``["a cat", "a dog"]`` or ``"a cat; a dog"``): the
            model becomes a zero-shot classifier over them (the predictions show their probabilities, one map per
            prompt, LeGrad by default; the prompt box of the window holds them).
        text_tower: the text tower (:func:`vitviz.model.text.open_text_tower`) for a module handed over in memory;
            a model opened from a folder, a file or by name finds its own.
        block: wait until the window is closed (default: yes, unless a Qt event loop already runs, as in IPython or
            Jupyter after ``%gui qt``).
        settings: a ``QSettings`` (default: the user's vitviz settings).
        adapter_options: for modules that are not vitviz ViTs: ``attention``, ``blocks``, ``patch_size``, ``grid``,
            ``num_prefix_tokens``, ``input_size``, ``name`` (:class:`vitviz.capture.foreign.AdaptedModel`).

    Returns:
        The window when not blocking (it stays open; keep using the notebook), else None once it is closed.

    Raises:
        NoDisplay: no window can open in this process (no display, no Qt platform plugin); one line, raised before
            anything is loaded (Qt would abort the process).
        CaptureError, ValueError: the model's attention cannot be captured, or bad images / labels / preprocess;
            raised before any window opens.
        TargetError: prompts that cannot be used (an empty one, a model without a text tower, a module without
            ``text_tower``), one line; raised before any window opens.
        TargetError: a ``target`` that cannot be used (not a target, a class the model lacks, a function that raises
            or returns no scalar on the first image), one line naming it; raised before any window opens.
    """
    from vitviz._util.display import NoDisplay, display_problem
    from vitviz.capture.foreign import adapt

    problem = display_problem()  # before the QApplication: Qt would abort the process (a kernel, a script)
    if problem is not None:
        raise NoDisplay(f"vitviz.show: no window can open here: {problem}")
    source = os.fspath(model) if isinstance(model, (str, os.PathLike)) else None
    if source is not None:  # a folder, a file or a name: opened here (its text tower comes from it)
        from vitviz.pipeline import Pipeline

        source = parse_model_ref(source)
        model = Pipeline.open(source, show_bar=False).model
    m = adapt(model, labels=labels, preprocess=preprocess, **adapter_options)
    items = _as_images(images)

    from PySide6.QtCore import QEvent, QEventLoop, QObject, QTimer

    from vitviz.gui.app import install_excepthook, make_app
    from vitviz.gui.main_window import MainWindow

    app = make_app()
    if block is None:
        block = not _qt_loop_running()
    from vitviz.pipeline import DTYPES, Pipeline

    # the caller's model stays on its device and in its precision (the window's remembered choice would cast it)
    first = next((p for p in m.parameters() if p.is_floating_point()), None)
    device = str(first.device) if first is not None else "cpu"
    precision = next((k for k, v in DTYPES.items() if first is not None and v == first.dtype), "fp32")
    pipe = Pipeline(m, device=device, precision=precision)
    pipe.source = source
    image = pipe
    if text is not None:
        pipe = _with_text(pipe, model, text, text_tower)
        pipe.precision_choice = precision
    elif text_tower is not None:
        pipe.attach_text_tower(text_tower)  # the prompt box offers prompts
    standing = _check_target(pipe, target, items) if target is not None else None
    win = MainWindow(settings=settings, model=pipe, model_key=source or "memory", device=device,
                     load_samples=not items)
    win.controller.device, win.controller.precision = device, precision
    win.controller.image_pipeline = image  # (under prompts: what clearing them returns to)
    if standing is not None:
        win.controller.set_standing_target(standing)  # every image is explained by it
    win.controller.modelChanged.emit("")  # the model bar and status bar say so
    for name, pil in items:
        if pil is not None:
            win.controller.memory_images[name] = pil
    win.show()
    if items:
        win.open_images([name for name, _ in items], remember=False)
    if not block:
        class _Forget(QObject):
            def eventFilter(self, obj, event):
                if event.type() == QEvent.Type.Close and obj in _OPEN:
                    del _OPEN[obj]
                return False

        _OPEN[win] = forget = _Forget(win)  # parented to the window: lives as long as it
        win.installEventFilter(forget)
        return win

    install_excepthook()
    loop = QEventLoop()

    class _QuitOnClose(QObject):
        def eventFilter(self, obj, event):
            if event.type() == QEvent.Type.Close:
                QTimer.singleShot(0, loop.quit)
            return False

    watcher = _QuitOnClose(win)
    win.installEventFilter(watcher)
    try:
        previous = signal.signal(signal.SIGINT, lambda *_: win.close())  # Ctrl+C closes the window
    except ValueError:  # not the main thread: no signal handling
        previous = None
    ticker = QTimer()  # Python sees signals only while it runs: wake it up
    ticker.timeout.connect(lambda: None)
    ticker.start(250)
    try:
        loop.exec()
    finally:
        ticker.stop()
        if previous is not None:
            signal.signal(signal.SIGINT, previous)
        if win.isVisible():
            win.close()
        # nobody can reach the window any more: delete it (its signal connections hold Python callbacks that refer
        # back to it, so it would otherwise live, with its model and results, as long as the process)
        win.deleteLater()
    del app
    return None
