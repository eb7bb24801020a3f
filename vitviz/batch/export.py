"""``vitviz export``: the window's maps for many images, headless, resumable and sharded. No Qt.

The maps are made by the window's own code: each image's :class:`~vitviz.pipeline.InferenceResult` goes into a
:class:`~vitviz.document.session.Session`, the view, layer, head and query are set as the window sets them, and the
files are ``Session.current_map()`` (npy: float32 ``[gh, gw]`` at patch resolution; an RGB view such as feature PCA:
its colours ``Session.rgb_map()[..., :3]``, float32 ``[gh, gw, 3]`` in [0, 1]) and the figure the window's
File > Export writes (:func:`vitviz.document.panel.view_figure` encoded by :func:`vitviz.render.figures.encode`:
PNG, colour bar and caption optional). Nothing here computes a map.

Streaming: :func:`vitviz.batch.inputs.stream_batches` reads and preprocesses images in worker threads, in order, a
bounded queue ahead of the model; each batch goes through the model in one forward and one backward (the gradients
only when a requested view needs them), streamed (:class:`vitviz.batch.batch_passes.BatchPasses`: each layer's
attention is reduced to what the requested maps need as the pass goes, so the memory holds about one layer's
attention, not every layer's; the maps equal the stored path's) where the model and views allow, else stored
(:meth:`vitviz.pipeline.Pipeline.run_batch`), in a batch size that adapts to the memory available; a writer thread
renders and writes the files of one batch while the next is computed. The queues between them hold at most a batch or
two, so 10,000 images use the memory of a few batches. An image whose figure would be over the figure limit is refused
from its header, before it is decoded or run (:func:`vitviz.batch.export_plan.figure_check`).

Files (under ``--out``): ``<name>_<view>_<options>.png|.npy`` where ``<name>`` mirrors the input's folders
(:class:`vitviz.batch.inputs.InputImage`) and the rest is the window's export name
(:meth:`vitviz.views.View.file_stem`); ``manifest.jsonl`` (``manifest-K-of-N.jsonl`` for a shard) with one JSON line
per image (:mod:`vitviz.batch.manifest`).
Every file is written atomically (:func:`vitviz.imaging.write_atomic`: no partial file, even when killed), and an
image's manifest line is appended only after all its files are complete, so an interrupted run loses no finished
image; a rerun skips every image whose line says it is complete for the same request (model, views, layers ...) and
whose files exist. A hidden journal (``.manifest.jsonl.pending``) names the files of the image being written, so that
a rerun after ``kill -9`` may replace them; any other existing file is replaced only with ``--overwrite``.

Before any work: the output folder is checked (:func:`vitviz._util.files.output_folder_problem`), a lock taken
(:mod:`vitviz.batch.locking`: a second export of the same folder and shard stops at once, naming the first one's
pid), and the manifests read: a run line records what each run's files are made with (the options and the model by
content, :mod:`vitviz.batch.fingerprint`); a rerun with other settings, or a line changed by hand, stops with one
line saying what (:mod:`vitviz.batch.rerun`); a last line cut short by a crash is removed, with a warning, before a
record is appended.

What can be asked is :class:`~vitviz.batch.export_options.ExportOptions` (the command's flags map one to one:
:mod:`vitviz.cli.export_command`); what each image becomes, :mod:`vitviz.batch.export_plan`; the manifest and the
journal, :mod:`vitviz.batch.manifest`; an image's maps and animations rendered, :mod:`vitviz.batch.export_maps`; the
output folder and its files, :mod:`vitviz.batch.export_files`.
"""

from __future__ import annotations

import os
import queue
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from vitviz import __version__
from vitviz.batch.batch_passes import BatchPasses, result_of
from vitviz.batch.export_files import OutputFiles
from vitviz.batch.export_maps import describe_result, write_maps
from vitviz.batch.export_options import ExportOptions, setting_names
from vitviz.batch.export_plan import (
    check_against_model,
    figure_check,
    grid_of,
    map_demands,
    needs_gradients,
)
from vitviz.batch.failures import FAILED_BASE, MAX_FAILED_STATUS, error_text
from vitviz.batch.fingerprint import model_sha256
from vitviz.batch.inputs import InputImage, Loaded, expand_inputs, progress_bar, stream_batches, take_shard
from vitviz.batch.locking import ExportLock
from vitviz.batch.manifest import (
    Appender,
    is_complete,
    journal_files,
    journal_path,
    manifest_name,
    plan_name,
    read_folder,
    repair_tail,
    request_id,
    set_aside_tail,
    source_key,
)
from vitviz.batch.parts import plan_shard, write_json
from vitviz.batch.prompt_passes import PromptPasses, per_prompt
from vitviz.batch.rerun import check_folder
from vitviz.batch.target_flags import read_prompts, read_target, text_digest
from vitviz.devices import running_on


class ExportFatal(RuntimeError):
    """The run cannot go on (the output folder is not writable, every image fails to write ...)."""


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
    """One export run (see the module's docstring). ``log(line)`` gets the log lines (default: stderr).
    ``streaming``: None streams the passes where the model and views allow; False stores every layer (the window's
    path); True insists on streaming. ``workers``: image-reading threads (default
    :func:`vitviz.batch.inputs.default_workers`). ``keep_graph``: how a streamed backward treats the blocks' graphs
    (:class:`~vitviz.batch.batch_passes.BatchPasses`: None by the memory available, True keeps, False recomputes)."""

    def __init__(self, pipeline: Any, options: ExportOptions, out: str | os.PathLike, *, model_ref: str = "model",
                 log: Callable[[str], None] | None = None, origin: str = "--shard", streaming: bool | None = None,
                 workers: int | None = None, keep_graph: bool | None = None):
        self.pipeline = pipeline
        self.options = options
        self.out = Path(out)
        self.model_ref = model_ref
        self.origin = origin  # where the shard came from (vitviz.batch.launcher), for the shard's plan
        self._log = log
        if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
            raise ValueError(f"workers (image-reading threads) must be a whole number of at least 1, got {workers!r}")
        self.workers = workers
        if options.text:  # prompts: the zero-shot classifier over them, one map per prompt (--text)
            pipeline = self.pipeline = read_prompts(pipeline, options.text, options.templates, target=options.target)
        spec = pipeline.spec
        self.num_classes = int(getattr(pipeline.model, "num_classes", 0) or 0)
        self.labels = getattr(spec, "labels", None)
        self.target = read_target(pipeline, options.target)  # a class, a similarity target, None: the top class
        cfg = getattr(pipeline.model, "config", None)
        check_against_model(options, getattr(cfg, "depth", None), getattr(cfg, "num_heads", None),
                            grid_of(spec, cfg))
        self.gradients = needs_gradients(options.views) and (self.num_classes > 0 or self.target is not None)
        self.passes = BatchPasses(pipeline, batch_size=options.batch_size, target=self.target,
                                  gradients=self.gradients, demands=lambda r: map_demands(r, options),
                                  streaming=streaming, note=lambda m: self.log(f"vitviz export: note: {m}"),
                                  keep_graph=keep_graph)
        if options.text and self.gradients:  # each image once per prompt, copy k explaining prompt k
            self.passes = PromptPasses(self.passes, self.num_classes)
        self.model_sha256 = model_sha256(pipeline.model)  # the model by content: once per run
        self.request = options.request(self.model_sha256, pipeline.precision)
        if options.text:  # the prompts' embeddings by content (the text tower, the templates)
            self.request["text_embeddings"] = text_digest(pipeline.model)
        if getattr(self.target, "kind", None) == "similarity":  # the reference by content, as the model
            self.request["target_reference"] = self.target.key[2]
        self.request_id = request_id(self.request)
        self.summary = ExportSummary(precision=pipeline.precision)
        self._live = 0  # results alive now (a finalizer counts each one down)
        self._bar: Any = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.files = OutputFiles(self.out, options.overwrite)

    # -------------------------------------------------------------- output
    def _backward_words(self) -> str:
        """How a streamed gradient pass treats the blocks' graphs, for the first line ("" when that is not asked)."""
        keep = self.passes.keep_graph
        if keep is None or not self.gradients or self.passes.route != "streamed":
            return ""
        return ", every block's graph kept" if keep else ", each block recomputed in the backward"

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
        written is finished, then the run stops (``summary.interrupted``).

        Raises:
            ExportError: the output folder cannot take files (checked before any work).
            vitviz.batch.locking.ExportBusy: another export is writing to the folder (this shard).
            vitviz.batch.rerun.ResumeMismatch, vitviz.batch.manifest.ManifestError: the folder holds maps made with
                other settings, or a manifest line changed by hand (without ``overwrite``).
        """
        t0 = time.perf_counter()
        self.summary.total = len(take_shard(images, *self.options.shard))
        self.files.prepare()
        lock = ExportLock(self.out, self.options.shard).acquire(note=lambda m: self.log(f"vitviz export: note: {m}"))
        try:
            if self.options.shard[1] > 1:  # the shard's plan, for vitviz merge (vitviz.batch.parts)
                write_json(self.out / plan_name(self.options.shard),
                           plan_shard("export", images, self.options.shard, self.origin).to_json())
            return self._run(take_shard(images, *self.options.shard), len(images), t0)
        finally:
            lock.release()

    def _run(self, todo: list[InputImage], n_inputs: int, t0: float) -> ExportSummary:
        o, s = self.options, self.summary
        name = manifest_name(o.shard)
        s.manifest = self.out / name
        self._journal_path = journal_path(self.out, name)
        state = read_folder(self.out)
        check_folder(self.out, state, self.request, setting_names(), overwrite=o.overwrite, own=s.manifest,
                     model_ref=self.model_ref, warn=lambda line: self.log(f"vitviz export: warning: {line}"))
        self.files.ours = state.ours
        cut = set_aside_tail(s.manifest)
        if cut is not None:
            self.log(f"vitviz export: warning: {s.manifest} line {cut[0]} was cut short (a run stopped while writing "
                     f"it): moved to {cut[1].name}, and its image is done again")
        repair_tail(self._journal_path)
        self.files.remove_stale_temporaries(journal_files(self._journal_path))
        if not o.overwrite:
            records = state.records
            before = len(todo)
            todo = [im for im in todo if not is_complete(records.get(source_key(im.path)), self.request_id, self.out)]
            s.skipped = before - len(todo)
        shard = f", shard {o.shard[0]}/{o.shard[1]} of {n_inputs}" if o.shard[1] > 1 else ""
        pipe = self.pipeline
        self.log(f"vitviz export: {len(todo)} image(s) to do, {s.skipped} already done{shard}; "
                 f"{running_on(getattr(pipe.spec, 'name', 'model'), pipe.device, pipe.precision_choice)}; batch "
                 f"{o.batch_size} ({self.passes.route} passes{self._backward_words()}); {len(o.views)} view(s) -> "
                 f"{self.out}")
        self._manifest = Appender(s.manifest)
        if todo:  # what the files of this run are made with: a later run compares its own settings with these
            self._manifest.write({"run": {"request": self.request_id, "settings": self.request,
                                          "model": self.model_ref, "started": time.strftime("%Y-%m-%d %H:%M:%S"),
                                          "time": time.time(), "vitviz": __version__}})
        self._journal = self.files.journal = Appender(self._journal_path)
        self._bar = progress_bar(len(todo), "export", quiet=o.quiet)
        jobs: queue.Queue = queue.Queue(maxsize=1)  # one batch waits while one is written and one is computed
        writer = threading.Thread(target=self._write_loop, args=(jobs,), name="vitviz-writer", daemon=True)
        self._writer_error: BaseException | None = None
        writer.start()
        restore = _sigterm_as_interrupt()
        try:
            for batch in stream_batches(self.pipeline, todo, o.batch_size, workers=self.workers,
                                        check=figure_check(o)):
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

    def _compute(self, batch: list[Loaded]) -> list[_Job]:
        """One forward (and backward) for the batch's readable images; an image that fails alone gets its error."""
        jobs = [_Job(lo.item, error=lo.error, load_s=lo.load_s) for lo in batch]
        ok = [j for j, lo in zip(jobs, batch) if lo.prepared is not None]
        prepared = [lo.prepared for lo in batch if lo.prepared is not None]
        if not ok:
            return jobs
        t = time.perf_counter()
        try:
            results = self.passes.run(prepared, [j.item.path for j in ok])
        except (KeyboardInterrupt, MemoryError):
            raise
        except Exception:  # noqa: BLE001 - find the image at fault: each alone
            results = []
            for j, p in zip(ok, prepared):
                try:
                    results += self.passes.run([p], [j.item.path])
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
                for i in range(len(batch)):
                    if self._stop.is_set():
                        return
                    ok = self._write_one(batch[i])
                    batch[i] = None  # drop the result now (no other name holds it): memory follows the batch
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
                items = per_prompt(job.result)  # (--text: one per prompt, the gradient views' maps of each)
                record.update(describe_result(result_of(items[0]), self.num_classes, self.options))
                gradient_only = replace(self.options, views=tuple(v for v in self.options.views
                                                                  if needs_gradients([v])))
                record["maps"] = [m for k, done in enumerate(items) for m in write_maps(
                    self.passes.session(done), item, written, self.options if k == 0 else gradient_only,
                    self.files.write)]
                record["status"] = "ok"
            except Exception as e:  # noqa: BLE001 - this image failed; the run goes on
                job.error, write_failed = e, isinstance(e, OSError)
        if job.error is not None:
            record["status"] = "error"
            record["error"] = error_text(job.error, item.path)
        record["files"] = written
        record["timings"] = {"load_s": round(job.load_s, 4), "compute_s": round(job.compute_s, 4),
                             "write_s": round(time.perf_counter() - t, 4)}
        # the image's name and files first: a line cut short by a crash still names them (manifest.cut_record_files)
        self._manifest.write({"output": record.pop("output"), "files": record.pop("files"), **record})
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
