"""``vitviz export``: the window's maps for many images, headless, resumable and sharded. No Qt.

The maps are made by the window's own code: each image's :class:`~vitviz.pipeline.InferenceResult` goes into a
:class:`~vitviz.document.session.Session`, the view, layer, head and query are set as the window sets them, and the files are
``Session.current_map()`` (npy: float32 ``[gh, gw]`` at patch resolution) and the figure the window's File > Export
writes (:func:`vitviz.render.figures.view_figure` encoded by :func:`vitviz.render.figures.encode`: PNG, colour bar and caption
optional). Nothing here computes a map.

Streaming: :func:`vitviz.batch.inputs.stream_batches` reads and preprocesses images on a loader thread; each batch goes
through the model in one forward and one backward (:meth:`vitviz.pipeline.Pipeline.run_batch`: the gradients only
when a requested view needs them); a writer thread renders and writes the files of one batch while the next is
computed. The queues between them hold at most a batch or two, so 10,000 images use the memory of a few batches.

Files (under ``--out``): ``<name>_<view>_<options>.png|.npy`` where ``<name>`` mirrors the input's folders
(:class:`vitviz.batch.inputs.InputImage`) and the rest is the window's export name (:meth:`vitviz.views.View.file_stem`);
``manifest.jsonl`` (``manifest-K-of-N.jsonl`` for a shard) with one JSON line per image (:func:`manifest_record`).
Every file is written atomically (:func:`vitviz.imaging.write_atomic`: no partial file, even when killed), and an
image's manifest line is appended only after all its files are complete, so an interrupted run loses no finished
image; a rerun skips every image whose line says it is complete for the same request (model, views, layers ...) and
whose files exist. A hidden journal (``.manifest.jsonl.pending``) names the files of the image being written, so that
a rerun after ``kill -9`` may replace them; any other existing file is replaced only with ``--overwrite``.

Every option lives in :class:`ExportOptions` and :func:`add_arguments` (the CLI's flags map one to one).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import queue
import signal
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from vitviz.batch.inputs import (
    InputImage, Loaded, add_common_arguments, check_device, expand_inputs, inputs_for_cli, parse_shard, progress_bar,
    stream_batches, take_shard,
)

DEFAULT_VIEWS = ("cls", "rollout", "grad_rollout", "relevance")
FORMATS = ("png", "npy", "both")
HEAD_WORDS = ("mean", "max", "min")
MANIFEST = "manifest.jsonl"
FAILED_BASE = 64  # exit status 64 + n: n images failed (capped at 63)
MAX_FAILED_STATUS = 63


class ExportFatal(RuntimeError):
    """The run cannot go on (the output folder is not writable, every image fails to write ...)."""


# ----------------------------------------------------------------------------------------------- options
@dataclass(frozen=True)
class ExportOptions:
    """Everything ``vitviz export`` can be told, in one place (see :func:`add_arguments` for each flag's help).

    Attributes:
        views: view keys of :mod:`vitviz.views`.
        layers: for views with a layer: ``"all"``, ``"last"``, ``"emb"`` (the embeddings, in the token views) or
            block indices (negative from the end).
        heads: for views with a head: ``"mean"``, ``"max"``, ``"min"``, ``"all"`` or head indices.
        query: ``(row, col)`` of the query patch (query, token similarity and position-embedding views), None = the
            centre patch.
        target: ``"top"``, a class index or a class name (or a unique part of one).
        format: ``"png"``, ``"npy"`` or ``"both"``.
        scale: PNG size: ``"native"`` (the image's own pixels), ``"print"`` (long side >= 2048 px, the window's
            default) or an integer factor.
        colorbar, caption, cmap: the figure's colour bar, its title + caption, and the colormap (as in the window).
        batch_size: images per forward pass.
        device, precision: where and how the model runs (``"auto"``: bf16 where the hardware has it).
        shard: ``(K, N)``: this run does shard K of N.
        overwrite: recompute every image and replace existing files.
        quiet: no progress bar (log lines only).
        animate: also each layer-dependent view over every layer as one animation (``"gif"``, ``"apng"``, ``"mp4"``;
            :func:`vitviz.render.figures.layer_figures`: one colour scale across layers, the layer drawn on each frame),
            at ``scale``; None: no animation.
        fps: frames per second of the animations.
    """

    views: tuple[str, ...] = DEFAULT_VIEWS
    layers: tuple[str, ...] = ("last",)
    heads: tuple[str, ...] = ("mean",)
    query: tuple[int, int] | None = None
    target: str = "top"
    format: str = "png"
    scale: str = "native"
    colorbar: bool = True
    caption: bool = True
    cmap: str = "inferno"
    batch_size: int = 16
    device: str = "cpu"
    precision: str = "auto"
    shard: tuple[int, int] = (1, 1)
    overwrite: bool = False
    quiet: bool = False
    animate: str | None = None
    fps: float = 2.0

    def request(self, model: str, precision: str) -> dict[str, Any]:
        """What the files depend on (a rerun with the same request skips the images done)."""
        d = asdict(self)
        for k in ("batch_size", "device", "precision", "shard", "overwrite", "quiet"):
            d.pop(k)
        d.update(model=model, precision=precision)
        return d


def _words(values: Sequence[str] | None) -> list[str]:
    return [w.strip() for v in (values or []) for w in str(v).split(",") if w.strip()]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``vitviz export`` (the model's load options and ``--debug`` are added by :mod:`vitviz.cli`)."""
    add_common_arguments(p, "output folder (created if missing)",
                         overwrite_help="redo every image, also those done, and replace existing files")
    p.add_argument("--views", action="append", metavar="V[,V...]",
                   help=f"views, comma-separated or the flag repeated (default: {','.join(DEFAULT_VIEWS)})")
    p.add_argument("--layers", action="append", metavar="L[,L...]",
                   help="layers of the views that have one: indices (negative from the end), 'last' (default), "
                        "'all', 'emb' (token views: the embeddings)")
    p.add_argument("--heads", action="append", metavar="H[,H...]",
                   help="heads of the views that have one: mean (default), max, min, indices or 'all'")
    p.add_argument("--query", metavar="ROW,COL",
                   help="query patch of the query / token-similarity / position-embedding views (default: centre)")
    p.add_argument("--target", default="top",
                   help="class of the gradient views: 'top' (each image's top class, default), an index or a name "
                        "(or a unique part of one)")
    p.add_argument("--format", choices=FORMATS, default="png",
                   help="png: the overlay as the window exports it; npy: the raw map at patch resolution (float32); "
                        "both")
    p.add_argument("--scale", default="native",
                   help="PNG size: native (the image's pixels, default), print (long side >= 2048 px, the "
                        "window's default) or a factor 1-16")
    p.add_argument("--no-colorbar", dest="colorbar", action="store_false", help="PNG without the colour bar")
    p.add_argument("--no-caption", dest="caption", action="store_false", help="PNG without title and caption")
    p.add_argument("--cmap", default="inferno", help="colormap (default inferno)")
    p.add_argument("--shard", metavar="K/N", help="do shard K of N (a deterministic 1/N of the images), e.g. for "
                                                  "a cluster job array")
    p.add_argument("--animate", choices=("gif", "apng", "mp4"),
                   help="also write each view that has a layer (or start layer) over every layer as one animation, "
                        "the layer drawn on each frame, one colour scale across layers (mp4 needs imageio-ffmpeg)")
    p.add_argument("--fps", type=float, default=2.0, help="frames per second of --animate (default 2)")


def options_from_args(args: argparse.Namespace) -> ExportOptions:
    """:class:`ExportOptions` from parsed flags, checked (ValueError naming the flag and the problem)."""
    from vitviz import views as registry
    from vitviz.imaging import colormap_names

    names = _words(args.views) or list(DEFAULT_VIEWS)
    valid = [v.key for v in registry.all_views()]
    unknown = [n for n in names if n not in valid]
    if unknown:
        raise ValueError(f"--views {' '.join(unknown)}: unknown view; valid: {', '.join(valid)}")
    layers = _words(args.layers) or ["last"]
    for w in layers:
        if w not in ("all", "last", "emb") and not _is_int(w):
            raise ValueError(f"--layers {w}: expected a layer index, 'last', 'all' or 'emb'")
    heads = _words(args.heads) or ["mean"]
    for w in heads:
        if w not in HEAD_WORDS + ("all",) and not (_is_int(w) and int(w) >= 0):
            raise ValueError(f"--heads {w}: expected a head index (0, 1 ...), mean, max, min or all")
    query = None
    if args.query:
        parts = str(args.query).replace(" ", "").split(",")
        if len(parts) != 2 or not all(_is_int(x) and int(x) >= 0 for x in parts):
            raise ValueError(f"--query {args.query}: expected ROW,COL of a patch, e.g. 7,7")
        query = (int(parts[0]), int(parts[1]))
    from vitviz.render.figures import parse_scale

    scale = str(parse_scale(args.scale))
    if args.cmap not in colormap_names():
        raise ValueError(f"--cmap {args.cmap}: unknown colormap; valid: {', '.join(colormap_names())}")
    shard = parse_shard(args.shard) if args.shard else (1, 1)
    animate = getattr(args, "animate", None)
    fps = float(getattr(args, "fps", 2.0))
    if not 0 < fps <= 60:
        raise ValueError(f"--fps {fps:g}: must be more than 0 and at most 60")
    if animate == "mp4":
        from vitviz.render.figures import mp4_problem

        if mp4_problem():
            raise ValueError(f"--animate mp4: {mp4_problem()}")
    if animate and not any(registry.get(n).slider for n in names):
        raise ValueError(f"--animate: none of the views ({', '.join(names)}) changes with the layer")
    return ExportOptions(views=tuple(dict.fromkeys(names)), layers=tuple(layers), heads=tuple(heads), query=query,
                         target=str(args.target).strip(), format=args.format, scale=scale, colorbar=args.colorbar,
                         caption=args.caption, cmap=args.cmap, batch_size=args.batch_size, device=args.device,
                         precision=args.precision, shard=shard, overwrite=args.overwrite, quiet=args.quiet,
                         animate=animate, fps=fps)


def _is_int(w: str) -> bool:
    try:
        int(w)
    except ValueError:
        return False
    return True


# ----------------------------------------------------------------------------------------------- targets, plans
def resolve_target(text: str | int | None, labels: Sequence[str] | None, num_classes: int) -> int | None:
    """``"top"`` / None -> None (each image's top class); an index; or a class name: the label itself or one of its
    comma-separated names (case-insensitive), else a unique part of one.

    Raises:
        ValueError: out of range, no class or several classes match (naming them), or a name without labels.
    """
    if text is None or str(text).strip().lower() in ("", "top"):
        return None
    t = str(text).strip()
    if num_classes <= 0:
        raise ValueError(f"--target {t}: the model has no classification head, so there is no class to explain")
    if _is_int(t):
        i = int(t)
        if not 0 <= i < num_classes:
            raise ValueError(f"--target {t}: out of range for a model with {num_classes} classes "
                             f"(valid: 0..{num_classes - 1})")
        return i
    if not labels:
        raise ValueError(f"--target {t}: the model has no class names; give a class index (0..{num_classes - 1})")
    low = t.lower()
    exact = [i for i, lab in enumerate(labels)
             if low == lab.lower() or low in (n.strip().lower() for n in lab.split(","))]
    hits = exact or [i for i, lab in enumerate(labels) if low in lab.lower()]
    if len(hits) == 1:
        return hits[0]
    if not hits:
        raise ValueError(f"--target {t}: no class name contains {t!r}")
    shown = ", ".join(f"{labels[i]} ({i})" for i in hits[:6]) + (" ..." if len(hits) > 6 else "")
    raise ValueError(f"--target {t}: {len(hits)} classes match ({shown}); be more precise or give the index")


def needs_gradients(view_keys: Sequence[str]) -> bool:
    """Whether any of the views needs the attention gradients of a target class."""
    from vitviz import views as registry

    return any(registry.get(k).needs_grads or "target" in registry.get(k).reads for k in view_keys)


def _grid_of(spec: Any, cfg: Any) -> tuple[int, int] | None:
    """The patch grid of the model's input (crop / patch size), or None when the spec does not say."""
    try:
        h, w = spec.input_size
        p = int(cfg.patch_size)
        return (int(h) // p, int(w) // p) if p > 0 else None
    except (AttributeError, TypeError, ValueError):
        return None


def check_against_model(options: ExportOptions, depth: int | None, heads: int | None,
                        grid: tuple[int, int] | None = None) -> None:
    """Layer and head indices and the query patch against the model (ValueError naming the flag and the valid
    range)."""
    if grid and options.query is not None and not (options.query[0] < grid[0] and options.query[1] < grid[1]):
        raise ValueError(f"--query {options.query[0]},{options.query[1]}: outside the model's {grid[0]}x{grid[1]} "
                         f"patch grid (rows 0..{grid[0] - 1}, columns 0..{grid[1] - 1})")
    if depth:
        for w in options.layers:
            if _is_int(w) and not -depth <= int(w) < depth:
                raise ValueError(f"--layers {w}: the model has {depth} layers (valid: 0..{depth - 1}, or -1 for the "
                                 "last)")
    if heads:
        for w in options.heads:
            if _is_int(w) and not 0 <= int(w) < heads:
                raise ValueError(f"--heads {w}: the model has {heads} heads (valid: 0..{heads - 1})")


def map_requests(result: Any, options: ExportOptions) -> list[tuple[str, dict[str, Any]]]:
    """Every map to make of ``result``: ``(view key, ViewOptions changes)``, in the order of the views, then layers,
    then heads; each view gets only the layers and heads it reads."""
    from vitviz import views as registry

    L, H = result.num_layers, result.num_heads
    gh, gw = result.grid
    row, col = options.query if options.query is not None else (gh // 2, gw // 2)
    if not (0 <= row < gh and 0 <= col < gw):
        raise ValueError(f"--query {row},{col}: outside the {gh}x{gw} patch grid")
    out = []
    for key in options.views:
        v = registry.get(key)
        layers: list[int | None] = [None]
        if "layer" in v.reads:
            lo, hi = v.layer_range(result)
            layers = []
            for w in options.layers:
                if w == "all":
                    layers += list(range(lo, hi + 1))
                elif w == "last":
                    layers.append(L - 1)
                elif w == "emb":
                    if lo < 0:
                        layers.append(-1)
                else:
                    i = int(w)
                    layers.append(i + L if i < 0 else i)
            layers = list(dict.fromkeys(x for x in layers if lo <= x <= hi)) or [L - 1]
        head_list: list[Any] = [None]
        if "head" in v.reads:
            head_list = []
            for w in options.heads:
                head_list += list(range(H)) if w == "all" else [w] if w in HEAD_WORDS else [int(w)]
            head_list = list(dict.fromkeys(head_list))
        for layer in layers:
            for head in head_list:
                changes: dict[str, Any] = {"view": key, "query": row * gw + col}
                if layer is not None:
                    changes["layer"] = layer
                if head is not None:
                    changes["head"] = head
                out.append((key, changes))
    return out


# ----------------------------------------------------------------------------------------------- manifest
def manifest_name(shard: tuple[int, int]) -> str:
    k, n = shard
    return MANIFEST if n == 1 else f"manifest-{k}-of-{n}.jsonl"


def _journal(out: Path, name: str) -> Path:
    return out / f".{name}.pending"


def read_manifests(out: Path) -> tuple[dict[str, dict], set[str]]:
    """The latest record of each source in every ``manifest*.jsonl`` of ``out`` (all shards), and every file any
    record or pending journal names (relative to ``out``: the files this tool wrote, which a rerun may replace).
    A damaged line (a run killed while appending) is skipped."""
    records: dict[str, dict] = {}
    ours: set[str] = set()
    for path in sorted(out.glob("manifest*.jsonl")) + sorted(out.glob(".manifest*.jsonl.pending")):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if not isinstance(rec, dict):
                continue
            ours.update(str(f) for f in rec.get("files", []) if isinstance(f, str))
            if "source" in rec and not path.name.endswith(".pending"):
                records[_key(str(rec["source"]))] = rec
    return records, ours


def _key(source: str) -> str:
    return os.path.normpath(os.path.abspath(source))


def is_complete(record: dict | None, request_id: str, out: Path) -> bool:
    """A manifest record of an image finished for this request, whose files all exist."""
    return (record is not None and record.get("status") == "ok" and record.get("request") == request_id
            and all((out / f).is_file() for f in record.get("files", [])))


def request_id(request: dict[str, Any]) -> str:
    return hashlib.sha1(json.dumps(request, sort_keys=True).encode()).hexdigest()[:12]


class _Appender:
    """A JSON-lines file appended one whole line per ``os.write`` (a kill cannot interleave two records), flushed to
    the system at once."""

    def __init__(self, path: Path):
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)

    def write(self, record: dict) -> None:
        os.write(self.fd, (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


# ----------------------------------------------------------------------------------------------- the run
@dataclass
class ExportSummary:
    """What a run did. ``peak_live_results``: the most :class:`~vitviz.pipeline.InferenceResult` s alive at once
    (bounded by the batch size, whatever the number of images)."""

    total: int = 0  # images of this shard
    skipped: int = 0  # already complete
    written: int = 0
    failed: int = 0
    files: int = 0
    seconds: float = 0.0
    manifest: Path | None = None
    precision: str = ""
    interrupted: bool = False
    peak_live_results: int = 0
    failures: list[tuple[str, str]] = field(default_factory=list)

    @property
    def exit_status(self) -> int:
        """0: every image done; 64 + n: n images failed (64 + 63 for 63 or more); 130: interrupted."""
        if self.interrupted:
            return 130
        return 0 if not self.failed else FAILED_BASE + min(self.failed, MAX_FAILED_STATUS)


@dataclass
class _Job:
    item: InputImage
    result: Any = None
    error: BaseException | None = None
    load_s: float = 0.0
    compute_s: float = 0.0


class Exporter:
    """One export run (see the module's docstring). ``log(line)`` gets the log lines (default: stderr)."""

    def __init__(self, pipeline: Any, options: ExportOptions, out: str | os.PathLike, *, model_ref: str = "model",
                 log: Callable[[str], None] | None = None):
        self.pipeline = pipeline
        self.options = options
        self.out = Path(out)
        self.model_ref = model_ref
        self._log = log
        spec = pipeline.spec
        self.num_classes = int(getattr(pipeline.model, "num_classes", 0) or 0)
        self.labels = getattr(spec, "labels", None)
        self.target = resolve_target(options.target, self.labels, self.num_classes)
        cfg = getattr(pipeline.model, "config", None)
        check_against_model(options, getattr(cfg, "depth", None), getattr(cfg, "num_heads", None),
                            _grid_of(spec, cfg))
        self.gradients = needs_gradients(options.views) and self.num_classes > 0
        self.request = options.request(model_ref, pipeline.precision)
        self.request_id = request_id(self.request)
        self.summary = ExportSummary(precision=pipeline.precision)
        self._live = 0  # results alive now (a finalizer counts each one down)
        self._bar: Any = None
        self._lock = threading.Lock()
        self._stop = threading.Event()

    # -------------------------------------------------------------- output
    def log(self, line: str) -> None:
        if self._log is not None:
            self._log(line)
            return
        if self._bar is not None and not self._bar.disable:
            self._bar.write(line, file=sys.stderr)
        else:
            print(line, file=sys.stderr, flush=True)

    # -------------------------------------------------------------- the run
    def run(self, images: Sequence[InputImage]) -> ExportSummary:
        """Export ``images`` (the whole input list: this run takes its shard). Ctrl+C / SIGTERM: the image being
        written is finished, then the run stops (``summary.interrupted``)."""
        t0 = time.perf_counter()
        o = self.options
        todo = take_shard(images, *o.shard)
        s = self.summary
        s.total = len(todo)
        self._prepare_folder()
        records, self._ours = read_manifests(self.out)
        self._remove_stale_temporaries()
        if not o.overwrite:
            before = len(todo)
            todo = [im for im in todo if not is_complete(records.get(_key(im.path)), self.request_id, self.out)]
            s.skipped = before - len(todo)
        name = manifest_name(o.shard)
        s.manifest = self.out / name
        from vitviz.devices import precision_reason

        shard = f", shard {o.shard[0]}/{o.shard[1]} of {len(images)}" if o.shard[1] > 1 else ""
        self.log(f"vitviz export: {len(todo)} image(s) to do, {s.skipped} already done{shard}; "
                 f"{getattr(self.pipeline.spec, 'name', 'model')} on {self.pipeline.device}, "
                 f"{precision_reason(self.pipeline.precision_choice, self.pipeline.device)}; batch "
                 f"{o.batch_size}; {len(o.views)} view(s) -> {self.out}")
        self._manifest = _Appender(s.manifest)
        self._journal_path = _journal(self.out, name)
        self._journal = _Appender(self._journal_path)
        self._bar = progress_bar(len(todo), "export", quiet=o.quiet)
        jobs: queue.Queue = queue.Queue(maxsize=1)  # one batch waits while one is written and one is computed
        writer = threading.Thread(target=self._write_loop, args=(jobs,), name="vitviz-writer", daemon=True)
        self._writer_error: BaseException | None = None
        writer.start()
        restore = _sigterm_as_interrupt()
        try:
            for batch in stream_batches(self.pipeline, todo, o.batch_size):
                if self._writer_error is not None or self._stop.is_set():
                    break
                self._put(jobs, self._compute(batch))
        except KeyboardInterrupt:
            s.interrupted = True
        finally:
            if s.interrupted:
                self._stop.set()
            self._put(jobs, None, force=True)
            writer.join()
            restore()
            self._bar.close()
            self._manifest.close()
            self._journal.close()
            if self._writer_error is None:
                try:
                    self._journal_path.unlink()
                except OSError:
                    pass
        if self._writer_error is not None:
            raise self._writer_error
        s.seconds = time.perf_counter() - t0
        done = s.written + s.failed
        rate = f", {done / s.seconds:.2f} images/s" if s.seconds > 0 and done else ""
        self.log(f"vitviz export: {s.written} image(s) written ({s.files} files), {s.failed} failed, {s.skipped} "
                 f"skipped (already done) in {s.seconds:.1f} s{rate}{' (interrupted)' if s.interrupted else ''}; "
                 f"manifest {s.manifest}")
        return s

    def _put(self, jobs: queue.Queue, item: Any, force: bool = False) -> None:
        """Hand a batch to the writer; waits while the writer is behind (bounded memory)."""
        while True:
            try:
                jobs.put(item, timeout=0.2)
                return
            except queue.Full:
                if self._writer_error is not None and not force:
                    return
                if force and self._stop.is_set():  # interrupted: drop what was not started
                    try:
                        jobs.get_nowait()
                    except queue.Empty:
                        pass

    def _prepare_folder(self) -> None:
        from vitviz._util.files import describe_os_error
        from vitviz.imaging import ExportError

        try:
            self.out.mkdir(parents=True, exist_ok=True)
        except FileExistsError:
            raise ExportError(self.out, "a file of that name exists (the output must be a folder)") from None
        except OSError as e:
            raise ExportError(self.out, f"cannot create the output folder ({describe_os_error(e)})") from None
        try:  # the probe write_atomic's own first step makes: a temporary file in the folder
            fd, tmp = tempfile.mkstemp(prefix=".vitviz-probe.", dir=self.out)
        except OSError as e:
            raise ExportError(self.out, f"the output folder is not writable ({describe_os_error(e)})") from None
        os.close(fd)
        os.unlink(tmp)

    def _remove_stale_temporaries(self) -> None:
        """A run killed while writing leaves the hidden temporary file of :func:`vitviz.imaging.write_atomic`
        (``.<stem>.<random>.png.tmp``) beside a file it was writing: remove those of files this tool writes."""
        if not list(self.out.glob(".manifest*.jsonl.pending")):
            return  # the last run ended cleanly
        stems: dict[Path, set[str]] = {}
        for rel in self._ours:
            p = self.out / rel
            stems.setdefault(p.parent, set()).add(p.stem)
        for folder, names in stems.items():
            try:
                entries = list(folder.iterdir())
            except OSError:
                continue
            for f in entries:
                n = f.name
                if not (n.startswith(".") and n.endswith((".png.tmp", ".npy.tmp"))):
                    continue
                dots = [i for i, c in enumerate(n) if c == "." and i > 0]
                if any(n[1:i] in names for i in dots):
                    try:
                        f.unlink()
                    except OSError:
                        pass

    def _compute(self, batch: list[Loaded]) -> list[_Job]:
        """One forward (and backward) for the batch's readable images; an image that fails alone gets its error."""
        jobs = [_Job(lo.item, error=lo.error, load_s=lo.load_s) for lo in batch]
        ok = [j for j, lo in zip(jobs, batch) if lo.prepared is not None]
        prepared = [lo.prepared for lo in batch if lo.prepared is not None]
        if not ok:
            return jobs
        t = time.perf_counter()
        try:
            results = self.pipeline.run_batch(prepared, sources=[j.item.path for j in ok], target=self.target,
                                              gradients=self.gradients)
        except (KeyboardInterrupt, MemoryError):
            raise
        except Exception:  # noqa: BLE001 - find the image at fault: each alone
            results = []
            for j, p in zip(ok, prepared):
                try:
                    results += self.pipeline.run_batch([p], sources=[j.item.path], target=self.target,
                                                       gradients=self.gradients)
                except Exception as e:  # noqa: BLE001 - reported in the manifest, the others go on
                    j.error = e
                    results.append(None)
        per = (time.perf_counter() - t) / len(ok)
        for j, r in zip(ok, results):
            j.result, j.compute_s = r, per
            if r is not None:
                with self._lock:
                    self._live += 1
                weakref.finalize(r, self._gone)
        with self._lock:
            self.summary.peak_live_results = max(self.summary.peak_live_results, self._live)
        return jobs

    def _gone(self) -> None:
        with self._lock:
            self._live -= 1

    # -------------------------------------------------------------- the writer thread
    def _write_loop(self, jobs: queue.Queue) -> None:
        consecutive_write_failures = 0
        try:
            while True:
                batch = jobs.get()
                if batch is None:
                    return
                for i, job in enumerate(batch):
                    if self._stop.is_set():
                        return
                    ok = self._write_one(job)
                    batch[i] = None  # drop the result now: memory follows the batch, not the run
                    if ok is False:
                        consecutive_write_failures += 1
                        if consecutive_write_failures >= 3 and self.summary.written == 0:
                            raise ExportFatal(f"{self.summary.failures[-1][1]} (3 images in a row could not be "
                                              "written; stopping)")
                    elif ok:
                        consecutive_write_failures = 0
        except BaseException as e:  # noqa: BLE001 - handed to the main thread, which raises it
            self._writer_error = e
            self._stop.set()

    def _write_one(self, job: _Job) -> bool | None:
        """Render and write one image's files, then its manifest line. True: written; False: its files could not be
        written; None: it could not be read or run."""
        item, t = job.item, time.perf_counter()
        record: dict[str, Any] = {"source": item.path, "output": item.rel, "request": self.request_id}
        written: list[str] = []
        write_failed = False
        if job.error is None and job.result is not None:
            try:
                record.update(self._describe(job.result))
                record["maps"] = self._write_maps(job.result, item, written)
                record["status"] = "ok"
            except Exception as e:  # noqa: BLE001 - this image failed; the run goes on
                job.error, write_failed = e, isinstance(e, OSError)
        if job.error is not None:
            record["status"] = "error"
            record["error"] = _error_text(job.error, item.path)
        record["files"] = written
        record["timings"] = {"load_s": round(job.load_s, 4), "compute_s": round(job.compute_s, 4),
                             "write_s": round(time.perf_counter() - t, 4)}
        self._manifest.write(record)
        with self._lock:
            s = self.summary
            if record["status"] == "ok":
                s.written += 1
                s.files += len(written)
            else:
                s.failed += 1
                s.failures.append((item.path, record["error"]))
                self.log(f"vitviz export: error: {record['error']}")
            self._bar.update(1)
        if record["status"] == "ok":
            return True
        return False if write_failed else None

    def _describe(self, r: Any) -> dict[str, Any]:
        top = r.top_k(5) if r.logits.ndim == 1 and self.num_classes > 0 else []
        target = None if r.target is None else {"class": int(r.target), "label": r.label(int(r.target))}
        return {"size": [int(r.image_size[1]), int(r.image_size[0])], "model": r.model_name,
                "precision": r.precision, "grid": list(r.grid),
                "predictions": [{"class": c, "label": lab, "p": round(p, 6)} for c, lab, p in top],
                "target": target}

    def _write_maps(self, r: Any, item: InputImage, written: list[str]) -> list[dict[str, Any]]:
        """Every requested map of one result through a :class:`~vitviz.document.session.Session`, as the window makes it."""
        import io

        import numpy as np

        from vitviz.render import figures
        from vitviz.document.session import Session

        o = self.options
        session = Session()
        session.set_result(r)
        session.set_options(cmap=o.cmap, colorbar=o.colorbar, caption=o.caption)
        base = session.options
        maps = []
        for key, changes in map_requests(r, o):
            session.options = base
            session.set_options(**changes)
            v = session.view
            entry: dict[str, Any] = {"view": key}
            for k in ("layer", "head"):
                if k in changes:
                    entry[k] = changes[k]
            if "query" in v.reads:
                entry["query"] = list(divmod(session.options.query, r.grid[1]))
            m = session.current_map()
            if m is None:
                entry["unavailable"] = session.unavailable_reason() or "not available for this model"
                maps.append(entry)
                continue
            stem = f"{item.rel}_{v.file_stem(r, session.options)}"
            files: list[tuple[str, bytes]] = []
            if o.format in ("npy", "both"):
                buf = io.BytesIO()
                np.save(buf, np.ascontiguousarray(m, dtype=np.float32))
                files.append((stem + ".npy", buf.getvalue()))
            if o.format in ("png", "both"):
                spec = figures.view_figure(session)
                data, _ = figures.encode(spec, ".png", scale=figures.parse_scale(o.scale))
                files.append((stem + ".png", data))
            for rel, data in files:
                self._write_file(rel, data, written)
                entry["npy" if rel.endswith(".npy") else "png"] = rel
            maps.append(entry)
        if o.animate:
            maps += self._write_animations(session, base, r, item, written)
        return maps

    def _write_animations(self, session: Any, base: Any, r: Any, item: InputImage,
                          written: list[str]) -> list[dict[str, Any]]:
        """``--animate``: each requested view that has a layer slider over every layer, one file per view (and head,
        query as for its maps): ``<name>_<view>[_<head>]_layers.<gif|apng|mp4>``."""
        from vitviz.render import figures

        out = []
        done = set()
        for key, changes in map_requests(r, self.options):
            changes = {k: v for k, v in changes.items() if k != "layer"}
            session.options = base
            session.set_options(**changes)
            v = session.view
            ident = (key, changes.get("head"))
            if v.slider is None or ident in done:
                continue
            done.add(ident)
            entry: dict[str, Any] = {"view": key, "layers": "all"}
            if "head" in changes:
                entry["head"] = changes["head"]
            if session.current_map() is None:
                entry["unavailable"] = session.unavailable_reason() or "not available for this model"
                out.append(entry)
                continue
            specs = figures.layer_figures(session)
            fmt = "." + self.options.animate
            data = figures.encode_animation(specs, fmt, scale=figures.parse_scale(self.options.scale),
                                            fps=self.options.fps)
            head = changes.get("head")
            head_part = "" if "head" not in v.reads else f"_{head}" if isinstance(head, str) else f"_h{head}"
            rel = f"{item.rel}_{key}{head_part}_layers{fmt}"
            self._write_file(rel, data, written)
            entry.update(animation=rel, frames=len(specs))
            out.append(entry)
        return out

    def _write_file(self, rel: str, data: bytes, written: list[str]) -> None:
        from vitviz.imaging import ExportError, write_atomic

        target = self.out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        replace_ok = self.options.overwrite or rel in self._ours
        if target.is_dir():
            raise ExportError(target, "a folder of that name exists")
        if not replace_ok and (target.exists() or target.is_symlink()):
            raise FileExistsError(f"{target} already exists and was not written by this export (pass --overwrite "
                                  "to replace it)")
        self._journal.write({"files": [rel]})
        self._ours.add(rel)
        write_atomic(target, lambda fh: fh.write(data), overwrite=replace_ok, suffix=Path(rel).suffix + ".tmp")
        written.append(rel)


def _error_text(e: BaseException, path: str) -> str:
    """One line naming the file: the project's errors already do."""
    from vitviz.imaging import ImageError

    if isinstance(e, ImageError):
        msg = str(e)
    elif isinstance(e, MemoryError):
        msg = f"not enough memory ({e})" if str(e) else "not enough memory"
    elif isinstance(e, (ValueError, RuntimeError, OSError)):
        msg = str(e) or type(e).__name__
    else:
        msg = f"unexpected {type(e).__name__}: {e}"
    msg = " ".join(part.strip() for part in msg.splitlines() if part.strip())
    return msg if path in msg else f"{path}: {msg}"


def _sigterm_as_interrupt() -> Callable[[], None]:
    """SIGTERM (``kill``, a scheduler's time limit) ends the run like Ctrl+C: the image being written is finished.
    Returns the function that restores the previous handler (a no-op off the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None

    def handler(signum, frame):
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except (ValueError, OSError):  # pragma: no cover - no signals here
        return lambda: None
    return lambda: signal.signal(signal.SIGTERM, previous)


# ----------------------------------------------------------------------------------------------- the command
def export_images(pipeline: Any, inputs: Sequence[str] | Sequence[InputImage], out: str | os.PathLike,
                  options: ExportOptions | None = None, *, model_ref: str = "model",
                  log: Callable[[str], None] | None = None) -> ExportSummary:
    """Export the maps of ``inputs`` (paths, folders, globs, lists; or :class:`InputImage` s) with ``pipeline``
    into ``out`` (the library form of ``vitviz export``)."""
    options = options or ExportOptions()
    if inputs and not isinstance(inputs[0], InputImage):
        images, problems = expand_inputs([str(i) for i in inputs])
        if problems:
            raise ValueError("; ".join(p for _, p in problems))
    else:
        images = list(inputs)  # type: ignore[arg-type]
    return Exporter(pipeline, options, out, model_ref=model_ref, log=log).run(images)


def run_cli(args: argparse.Namespace, report: Callable[[BaseException, str | None], int], load: Callable) -> int:
    """``vitviz export``: checks every flag, loads the model, exports; returns the exit status (0; 2: the command
    could not run; 64 + n: n images failed; 130: interrupted)."""
    from vitviz.pipeline import Pipeline

    options = options_from_args(args)
    device = check_device(options.device, options.precision, options.batch_size)
    options = replace(options, device=device)
    images, status = inputs_for_cli(args.inputs, report)
    if not images:
        return 2
    from vitviz.model.sources.refs import parse_model_ref

    ref = parse_model_ref(args.model)
    model = load(args, args.model)
    pipeline = Pipeline(model, device=device, precision=options.precision)
    summary = Exporter(pipeline, options, args.out, model_ref=ref).run(images)
    return summary.exit_status or status


def read_manifest(path: str | os.PathLike) -> list[dict]:
    """The records of one manifest, in order."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
