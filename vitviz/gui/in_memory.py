"""``vitviz.show(model, images)``: the window on a model that lives in memory (a script, IPython or a notebook).

The model may be a :class:`vitviz.model.ViT` or any other ViT module (:class:`vitviz.capture.foreign.AdaptedModel`
finds its attention). Qt (and torch) are imported only when the window opens.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from typing import Any

from vitviz.document.handed import as_images, check_target, memory_pipeline, with_text

__all__ = ["show"]

# windows opened without blocking -> the event filter that forgets each when it closes (keeps both alive until then)
_OPEN: dict[Any, Any] = {}


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


def show(model: Any, images: Any = None, *, labels: Sequence[str] | None = None, preprocess: Any = None,
         target: Any = None, text: Any = None, text_tower: Any = None, block: bool | None = None,
         settings: Any = None, notebook: bool | None = None, **adapter_options: Any) -> Any:
    """Open the vitviz window on an in-memory model; in a notebook kernel, or where there is no display, return the
    notebook viewer (:class:`vitviz.notebook.Viewer`) instead.

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
        notebook: return the notebook viewer (True) or open the window (False); None: the viewer in a notebook
            kernel without ``%gui qt`` or where no display can show a window (:func:`vitviz.notebook.routing.
            notebook_wanted`).
        adapter_options: for modules that are not vitviz ViTs: ``attention``, ``blocks``, ``patch_size``, ``grid``,
            ``num_prefix_tokens``, ``input_size``, ``name`` (:class:`vitviz.capture.foreign.AdaptedModel`).

    Returns:
        The notebook viewer (see ``notebook``); the window when not blocking (it stays open; keep using the
        notebook), else None once it is closed.

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
    from vitviz.notebook.routing import notebook_wanted

    if notebook if notebook is not None else notebook_wanted():  # a notebook kernel, or no display: the widget
        from vitviz.notebook import Viewer

        return Viewer(model, images, labels=labels, preprocess=preprocess, target=target, text=text,
                      text_tower=text_tower, **adapter_options)
    problem = display_problem()  # before the QApplication: Qt would abort the process (a kernel, a script)
    if problem is not None:
        raise NoDisplay(f"vitviz.show: no window can open here: {problem} (notebook=True gives the notebook viewer)")
    pipe, source = memory_pipeline(model, labels=labels, preprocess=preprocess, **adapter_options)
    items = as_images(images)

    from PySide6.QtCore import QEvent, QEventLoop, QObject, QTimer

    from vitviz.gui.app import install_excepthook, make_app
    from vitviz.gui.main_window import MainWindow

    app = make_app()
    if block is None:
        block = not _qt_loop_running()
    # the caller's model stays on its device and in its precision (the window's remembered choice would cast it)
    device, precision = pipe.device, pipe.precision
    image = pipe
    if text is not None:
        pipe = with_text(pipe, model, text, text_tower)
        pipe.precision_choice = precision
    elif text_tower is not None:
        pipe.attach_text_tower(text_tower)  # the prompt box offers prompts
    standing = check_target(pipe, target, items) if target is not None else None
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
