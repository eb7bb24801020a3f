"""The notebook viewer: an anywidget over a :class:`~vitviz.document.session.Session`, for Jupyter, VS Code, Colab
and marimo (``mo.ui.anywidget``). No Qt.

The kernel holds the model, the results and the session; the browser draws (``viewer.js``): the photo with the map
over it on a canvas, the colour map applied from lookup tables sent once, the maps at patch resolution
(:mod:`vitviz.notebook.payload`). What the user does in the browser is written to the widget's traits (view, layer,
head, query patch, colour map, opacity, image, target, prompts); the kernel checks it, applies it to the session and
sends what changed. A new image, target or prompt runs on the viewer's worker thread (the newest request wins; the
widget says what it is doing), so the kernel stays free. Every handler holds the viewer's lock (ipykernel 7 runs
comm handlers on other threads). Bad input (an unreadable image, a bad target or prompt) is one line in the widget
and changes nothing.
"""

from __future__ import annotations

import base64
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import anywidget
import traitlets

from vitviz import imaging, views
from vitviz.document import state as st
from vitviz.document.handed import as_images, check_target, memory_pipeline, with_text
from vitviz.document.panel import figure_size_problem, render_view, view_figure
from vitviz.document.session import Session
from vitviz.notebook import payload
from vitviz.pipeline import prompt_pipeline, reference_target
from vitviz.pipeline.references import SIMILAR, parse_target
from vitviz.render import figures

__all__ = ["Viewer"]

_HERE = Path(__file__).parent
_INTENTS = ("view", "layer", "head", "query", "cmap", "opacity", "image_index", "target", "prompts")


def _line(e: BaseException) -> str:
    """An error as one line."""
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


class Viewer(anywidget.AnyWidget):
    """vitviz in a notebook: the image with the map over it, every view of the model, layer and head sliders (arrow
    keys too), click a patch for the query view, hover for the value, the target box, the heads grid and stepping
    through several images.

    ``Viewer(model, images, ...)`` takes what :func:`vitviz.show` takes (a module, or a model's folder, file or
    name; image files, PIL images, arrays or tensors; labels, preprocess, target, text prompts, text tower, adapter
    options); :meth:`from_state` reopens a session file. Set the traits from Python as the browser does
    (``viewer.view = "rollout"``, ``viewer.layer = 3``); :meth:`wait` waits for the worker, :meth:`export` writes the
    current view as PNG / SVG / PDF and :attr:`state` is the session file's state.
    """

    _esm = _HERE / "viewer.js"
    _css = _HERE / "viewer.css"

    # what the user looks at (written by the browser or by Python; checked by the kernel)
    view = traitlets.Unicode("cls").tag(sync=True)
    layer = traitlets.Int(0).tag(sync=True)
    head = traitlets.Unicode("mean").tag(sync=True)
    query = traitlets.Int(0).tag(sync=True)
    cmap = traitlets.Unicode("inferno").tag(sync=True)
    opacity = traitlets.Float(0.6).tag(sync=True)
    image_index = traitlets.Int(0).tag(sync=True)
    target = traitlets.Unicode("top").tag(sync=True)
    prompts = traitlets.Unicode("").tag(sync=True)
    show_heads = traitlets.Bool(False).tag(sync=True)
    # what the kernel sends
    views = traitlets.List().tag(sync=True)
    heads = traitlets.List().tag(sync=True)
    layer_range = traitlets.List([0, 0]).tag(sync=True)
    images = traitlets.List().tag(sync=True)
    classes = traitlets.List().tag(sync=True)
    predictions = traitlets.List().tag(sync=True)
    target_label = traitlets.Unicode("").tag(sync=True)
    photo = traitlets.Bytes(b"").tag(sync=True)
    photo_meta = traitlets.Dict().tag(sync=True)
    luts = traitlets.Bytes(b"").tag(sync=True)
    lut_names = traitlets.List().tag(sync=True)
    frames = traitlets.Bytes(b"").tag(sync=True)
    values = traitlets.Bytes(b"").tag(sync=True)
    meta = traitlets.Dict().tag(sync=True)
    head_frames = traitlets.Bytes(b"").tag(sync=True)
    head_values = traitlets.Bytes(b"").tag(sync=True)
    head_meta = traitlets.Dict().tag(sync=True)
    status = traitlets.Unicode("").tag(sync=True)
    busy = traitlets.Unicode("").tag(sync=True)

    def __init__(self, model: Any = None, images: Any = None, *, labels: Any = None, preprocess: Any = None,
                 target: Any = None, text: Any = None, text_tower: Any = None, session: Session | None = None,
                 pipeline: Any = None, model_ref: str | None = None, **adapter_options: Any) -> None:
        """See the class. ``session`` / ``pipeline`` / ``model_ref``: a session already shown (:meth:`from_state`).

        Raises:
            CaptureError, ValueError, ImageError: the model's attention cannot be captured, bad images, labels or
                preprocess; TargetError: a target or prompts that cannot be used (one line each), before anything
                is shown.
        """
        lut, names = payload.lookup_tables()
        super().__init__(luts=lut, lut_names=names)
        self._lock = threading.RLock()
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vitviz-notebook")
        self._job: Future | None = None
        self._generation = 0
        self._applying = False
        self._memory: dict[str, Any] = {}
        self._shown: dict[str, str] = {"target": "top", "prompts": ""}  # the target box's and prompts' applied text
        if session is not None:
            self._pipe = self._image_pipe = pipeline
            self._ref = model_ref or st.IN_MEMORY_MODEL
            self._session = session
            self._target = None
        else:
            self._pipe, source = memory_pipeline(model, labels=labels, preprocess=preprocess, **adapter_options)
            self._image_pipe = self._pipe
            self._ref = source or st.IN_MEMORY_MODEL
            items = as_images(images)
            if not items:
                from vitviz.resources import sample_images

                items = [(str(p), None) for p in sample_images()]
            if text is not None:
                self._pipe = with_text(self._pipe, model, text, text_tower)
            elif text_tower is not None:
                self._pipe.attach_text_tower(text_tower)
            self._target = check_target(self._pipe, target, items) if target is not None else None
            self._session = Session()
            for name, pil in items:
                if pil is not None:
                    self._memory[name] = pil
            self._session.images = [name for name, _ in items]
            self._session.set_result(self._analyse(self._session.images[0], self._pipe, self._target))
        with self.hold_trait_notifications():
            self._applying = True
            try:
                self.prompts = self._shown["prompts"] = "; ".join(self._pipe_prompts())
                self._push()
            finally:
                self._applying = False
        self.observe(self._on_intent, names=list(_INTENTS))

    # ------------------------------------------------------------------ opening
    @classmethod
    def from_state(cls, path: str | os.PathLike | st.SessionState, *, pipeline: Any = None,
             device: str = "cpu") -> Viewer:
        """A viewer showing a session file (or a figure vitviz exported, or a :class:`SessionState`).

        Args:
            pipeline: a loaded model to use instead of opening the state's model (needed for a model that was
                handed over in memory).

        Raises:
            StateError: the file cannot be read or names missing files (one line); CheckpointError, ImageError:
                the model or image cannot be read.
        """
        state = path if isinstance(path, st.SessionState) else st.read_state(path)
        if pipeline is None and state.model == st.IN_MEMORY_MODEL:
            raise st.StateError(None, "the session's model was handed over in memory: pass it as pipeline=")
        session, pipe = st.reproduce(state, pipeline=pipeline, device=device)
        viewer = cls(session=session, pipeline=pipe, model_ref=state.model)
        r = session.result
        if r is not None and r.target_spec is not None and state.target is not None:  # a class: kept for new images
            with viewer._lock:
                viewer._target = r.target_spec
                viewer._applying = True
                try:
                    viewer.target = viewer._shown["target"] = str(state.target)
                finally:
                    viewer._applying = False
        return viewer

    # ------------------------------------------------------------------ what Python reads
    @property
    def session(self) -> Session:
        """The document the viewer shows (read it under :meth:`wait`; the viewer writes it)."""
        return self._session

    @property
    def pipeline(self) -> Any:
        """The model the viewer runs (:class:`~vitviz.pipeline.Pipeline`; over the prompts when there are some)."""
        return self._pipe

    @property
    def state(self) -> st.SessionState:
        """What the viewer shows as a session file's state (``vitviz.document.state.save_state(viewer.state, p)``
        writes one; :meth:`from_state` reopens it)."""
        with self._lock:
            p = self._pipe
            return st.capture_state(self._session, self._ref, device=p.device, precision=p.precision,
                                    preprocess=getattr(p.spec, "preprocess", None), heads_all_layers=False)

    def wait(self, timeout: float | None = None) -> Viewer:
        """Wait until the worker has finished the newest request (an image, a target, prompts)."""
        while True:
            job = self._job
            if job is None:
                return self
            job.result(timeout)
            if self._job is job:
                return self

    def export(self, path: str | os.PathLike, *, scale: str = "print", overwrite: bool = False) -> Path:
        """Write the current view as the window's figure (PNG / SVG / PDF by the extension, the session's state in
        its metadata, :func:`vitviz.render.figures.save`).

        Raises:
            ValueError: the view has no map (why), or its figure would be over the figure limit (known from the
                image's size); ExportError, FileExistsError: as :func:`figures.save`.
        """
        with self._lock:
            problem = figure_size_problem(self._session, figures.layout_scale(Path(path).suffix, scale))
            if problem:  # from the image's size, before the map is drawn at its pixels
                raise ValueError(f"{problem}; choose a smaller scale or reduce the image")
            spec = view_figure(self._session)
            if spec is None:
                raise ValueError(f"{self._session.view.title} is not available: {self._session.unavailable_reason()}")
            meta = st.figure_metadata(self.state, path)
            return figures.save(spec, path, scale=scale, metadata=meta, overwrite=overwrite)

    def add_images(self, images: Any) -> None:
        """Open more images (files, PIL images, arrays, tensors) and show the first of them (on the worker)."""
        items = as_images(images)
        with self._lock:
            for name, pil in items:
                if pil is not None:
                    self._memory[name] = pil
            first = self._session.add_images([name for name, _ in items])
            self.images = [self._words(n) for n in self._session.images]
        if items:
            self.image_index = first

    def _repr_mimebundle_(self, **kwargs: Any) -> Any:
        """The widget, with a PNG of the current view for renderers that cannot run it (GitHub, nbviewer)."""
        bundle = super()._repr_mimebundle_(**kwargs)
        data = bundle[0] if isinstance(bundle, tuple) else bundle
        if data is not None:
            png = self.png()
            if png:
                data["image/png"] = base64.b64encode(png).decode("ascii")
        return bundle

    def png(self) -> bytes:
        """The current view as PNG bytes (the figure at the image's own size); empty without a map."""
        from PIL import Image

        with self._lock:
            px = render_view(self._session, "native")
        if px is None:
            return b""
        import io

        buf = io.BytesIO()
        Image.fromarray(px).save(buf, format="PNG")
        return buf.getvalue()

    def close(self) -> None:
        pool = getattr(self, "_pool", None)  # (ipywidgets closes a widget whose construction failed too)
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
        super().close()

    # ------------------------------------------------------------------ intents
    def _on_intent(self, change: dict[str, Any]) -> None:
        if self._applying:
            return
        name, old, new = change["name"], change["old"], change["new"]
        with self._lock:
            before = self._session.options
            try:
                self._apply(name, new)
            except Exception as e:  # noqa: BLE001 - one line in the widget, the intent undone
                if self._session.options != before:  # (a map that could not be made: what was shown comes back)
                    self._session.options = before
                    self._push()
                self._undo(name, old, f"{name} {new!r}: {_line(e)}")
            else:
                if name not in ("image_index", "target", "prompts"):
                    self.status = ""

    def _undo(self, name: str, old: Any, message: str) -> None:
        self._applying = True
        try:
            setattr(self, name, old)
            self.status = message
        finally:
            self._applying = False

    def _apply(self, name: str, value: Any) -> None:
        s = self._session
        if name == "view":
            views.get(value)  # an unknown view: ValueError naming the valid ones
            s.set_options(view=value)
            self._push()
        elif name == "layer":
            s.set_slider(value)
            self._push(frames=False)
        elif name == "head":
            s.set_options(head=int(value) if str(value).lstrip("-").isdigit() else value)
            self._push()
        elif name == "query":
            s.set_options(query=value)
            self._push()
        elif name == "cmap":
            s.set_options(cmap=value)
            self._push()
        elif name == "opacity":
            s.set_options(opacity=value)
            self._push(frames=False)
        elif name == "image_index":
            if not 0 <= value < len(s.images):
                raise ValueError(f"no image {value}: {len(s.images)} are open (0..{len(s.images) - 1})")
            name = s.images[value]
            self._submit(f"analysing {self._words(name)}", "image", name, lambda: (self._pipe, self._target))
        elif name == "target":
            self._submit(f"explaining {value}", "target", s.images[s.index],
                         lambda: (self._pipe, self._parse_target(value)))
        elif name == "prompts":
            self._submit("encoding the prompts" if value.strip() else "back to the model's classes", "prompts",
                         s.images[s.index], lambda: (prompt_pipeline(self._image_pipe, value) if value.strip()
                                                     else self._image_pipe, None))

    def _parse_target(self, text: str) -> Any:
        """A target from the target box: ``top``, a class index or name, ``similar:NAME[@ROW,COL]`` with NAME an
        open image (or any image file), or ``similar:VECTOR.npy``."""
        t = text.strip()
        if t.lower().startswith(SIMILAR):
            ref, _, where = t[len(SIMILAR):].strip().partition("@")
            names = {self._words(n): n for n in self._session.images} | {n: n for n in self._session.images}
            if ref.strip() in names:
                name = names[ref.strip()]
                patch = None
                if where:
                    try:
                        patch = tuple(int(v) for v in where.split(","))
                    except ValueError:
                        raise ValueError(f"the patch must be ROW,COL (two integers), got {where!r}") from None
                    if len(patch) != 2:
                        raise ValueError(f"the patch must be ROW,COL (two integers), got {where!r}")
                if name not in self._memory:  # a file: the target names it (and a session file reopens it)
                    return reference_target(self._pipe, name, patch=patch)
                words = f"patch ({patch[0]}, {patch[1]}) of {name}" if patch is not None else f"image {name}"
                return reference_target(self._pipe, self._memory[name], patch=patch, name=words)
        labels = getattr(self._pipe.spec, "labels", None)
        return parse_target(self._pipe, t, labels)

    # ------------------------------------------------------------------ the worker
    def _submit(self, what: str, kind: str, name: str, make: Any) -> None:
        """Run ``name`` through ``make() -> (pipeline, target)`` on the worker; the newest request wins. On success
        the session shows the result (``kind`` "target" / "prompts": the target or pipeline is kept for the next
        images); on failure one line says why and the intent is undone (an image that cannot be read is closed)."""
        self._generation += 1
        generation = self._generation
        self.busy = what

        def work() -> None:
            try:
                pipe, target = make()
                result = self._analyse(name, pipe, target)
            except Exception as e:  # noqa: BLE001 - one line in the widget; what was shown stays
                with self._lock:
                    if generation != self._generation:
                        return
                    self.busy = ""
                    if kind == "image":
                        self._session.forget_image(name)
                        self._push()
                        self._undo("image_index", max(self._session.index, 0), f"{self._words(name)}: {_line(e)}")
                    else:
                        self._undo(kind, self._shown[kind], f"{kind} {getattr(self, kind)!r}: {_line(e)}")
                return
            with self._lock:
                if generation != self._generation:
                    return  # a newer request came: this one is stale
                if kind == "prompts":
                    self._pipe, self._target = pipe, None
                    self._shown.update(prompts=self.prompts, target="top")
                elif kind == "target":
                    self._target = target
                    self._shown["target"] = self.target
                self._session.set_result(result)
                self._push()
                self.status = ""
                self.busy = ""

        self._job = self._pool.submit(work)

    def _image(self, name: str) -> Any:
        if name in self._memory:
            return self._memory[name]
        return imaging.load_image(name).image  # ImageError: one line naming the file and the problem

    def _analyse(self, name: str, pipe: Any, target: Any) -> Any:
        return pipe.run(self._image(name), source=name, target=target)

    # ------------------------------------------------------------------ sending
    def _words(self, name: str) -> str:
        return name if name in self._memory else Path(name).name

    def _pipe_prompts(self) -> list[str]:
        r = self._session.result
        return [str(p) for p in r.labels] if r is not None and getattr(r, "head_kind", "") == "prompts" else []

    def _push(self, *, frames: bool = True) -> None:
        """Send what the session shows now (``frames``: the view's maps too; a layer or opacity change needs none)."""
        s = self._session
        r = s.result
        if r is None:
            return
        o = s.options
        was = self._applying
        self._applying = True
        try:
            # one message for the lot: the browser then paints the new maps with the new layer, never a mix
            with self.hold_sync(), self.hold_trait_notifications():
                if frames:
                    f = payload.view_frames(s)
                    self.frames, self.values, self.meta = f.index, f.values, f.meta
                    png, size = payload.photo_png(r.rgb)
                    y0, x0, y1, x1 = s.crop_rect_yx()
                    self.photo = png
                    self.photo_meta = {"size": list(size), "image_size": list(r.image_size),
                                       "crop": [x0, y0, x1 - x0, y1 - y0], "prefix": r.num_prefix_tokens,
                                       "source": self._words(str(r.source))}
                    self.views = payload.view_list(s)
                    self.heads = payload.head_choices(s)
                    self.images = [self._words(n) for n in s.images]
                    self.classes = list(r.labels or ())
                    self.predictions = [[i, label, p] for i, label, p in r.top_k(5)]
                    self.target_label = r.target_text() or ""
                h = payload.heads_frames(s)
                if h is not None:
                    self.head_frames, self.head_values, self.head_meta = h.index, h.values, h.meta
                self.view, self.head, self.query = o.view, str(o.head), int(o.query)
                self.cmap, self.opacity = o.cmap, float(o.opacity)
                self.layer_range = list(s.slider_range())
                self.layer = s.slider_value()
                self.image_index = max(s.index, 0)
                self.target, self.prompts = self._shown["target"], self._shown["prompts"]
        finally:
            self._applying = was
