"""``vitviz stats``: attention statistics over a set of images, as the ViT paper's Fig. 7 (right) plots them. No Qt.

Per layer and head, over the images: the mean attention distance in input pixels (Dosovitskiy et al. 2020, Fig. 7
right: averaged over 128 images there) and the mean attention entropy in nats, each as the mean and the standard
deviation over the images; and per patch position, the share of images in which the token there is flagged as a
high-norm "artefact" token (Darcet et al. 2023; :func:`vitviz.analysis.high_norm_tokens` with the window's defaults).

Each image's numbers are the window's own: its result goes into a :class:`~vitviz.document.session.Session`, which gives
``mean_distances()``, ``entropies()`` and ``artefact_grid()`` exactly as the plots panel and the canvas show them. The
images stream through :func:`vitviz.batch.inputs.stream_batches` and :meth:`vitviz.pipeline.Pipeline.run_batch` (forward
only: no statistic needs a gradient), and only running sums are kept, so the memory does not grow with the number of
images.

Writes (``--out DIR``): ``attention_stats.csv`` (one row per layer and head), ``artefact_frequency.csv`` (one row per
patch position) and ``attention_stats.png`` / ``.svg`` (three panels: distance and entropy against depth, one colour
per head with the spread over images as error bars, and the artefact frequency over the patch grid). The window opens
``attention_stats.csv`` (Plots > Distance > Dataset…) to draw the dataset's curve beside "this image".
"""

from __future__ import annotations

import argparse
import csv
import io
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vitviz.batch.inputs import (
    InputImage, add_common_arguments, check_device, inputs_for_cli, progress_bar, stream_batches,
)

STATS_CSV = "attention_stats.csv"
ARTEFACT_CSV = "artefact_frequency.csv"
FIGURE = "attention_stats"  # .png and .svg
STATS_COLUMNS = ("model", "images", "layer", "head", "mean_distance_px", "sd_distance_px", "mean_entropy_nats",
                 "sd_entropy_nats")
ARTEFACT_COLUMNS = ("model", "images", "row", "col", "flagged_fraction", "flagged_images")

if TYPE_CHECKING:  # pragma: no cover - numpy is imported where it is used (the parser of `vitviz models` stays light)
    import numpy as np


@dataclass
class DatasetStats:
    """Statistics of a set of images (see the module's docstring).

    Attributes:
        model: the model's name.
        images: how many images the statistics cover.
        distance_mean, distance_sd: ``[L, H]`` mean attention distance (input pixels): mean and standard deviation
            (ddof 1; 0 for one image) over the images.
        entropy_mean, entropy_sd: ``[L, H]`` mean attention entropy (nats), likewise.
        artefact_frequency: ``[gh, gw]`` share of the images whose patch there is flagged (None when not read).
        artefact_images: the images the frequency counts (those on the first image's patch grid).
        num_tokens: tokens per image (for the entropy of uniform attention, ``ln N``), 0 when unknown.
    """

    model: str
    images: int
    distance_mean: np.ndarray
    distance_sd: np.ndarray
    entropy_mean: np.ndarray
    entropy_sd: np.ndarray
    artefact_frequency: np.ndarray | None = None
    artefact_images: int = 0
    num_tokens: int = 0

    @property
    def num_layers(self) -> int:
        return int(self.distance_mean.shape[0])

    @property
    def num_heads(self) -> int:
        return int(self.distance_mean.shape[1])


class StatsAccumulator:
    """Running sums of per-image statistics (float64): :meth:`add` one :class:`~vitviz.document.session.Session` (holding an
    image's result) at a time, :meth:`stats` at any point."""

    def __init__(self) -> None:
        self.n = 0
        self.model = "model"
        self._sum: dict[str, np.ndarray] = {}
        self._sq: dict[str, np.ndarray] = {}
        self._flags: np.ndarray | None = None
        self._flag_images = 0
        self._tokens = 0

    def add(self, session: Any) -> None:
        """Add the image whose result ``session`` holds (its distances, entropies and flagged patches)."""
        import numpy as np

        r = session.result
        values = {"distance": np.asarray(session.mean_distances(), np.float64),
                  "entropy": np.asarray(session.entropies(), np.float64)}
        if self.n and values["distance"].shape != self._sum["distance"].shape:
            raise ValueError(f"{r.source}: {values['distance'].shape[0]} layers x {values['distance'].shape[1]} "
                             f"heads, but the first image had {self._sum['distance'].shape}")
        for k, v in values.items():
            if self.n == 0:
                self._sum[k], self._sq[k] = np.zeros_like(v), np.zeros_like(v)
            self._sum[k] += v
            self._sq[k] += v * v
        grid = session.artefact_grid()
        if grid is not None:
            if self._flags is None:
                self._flags = np.zeros(grid.shape, np.int64)
            if grid.shape == self._flags.shape:
                self._flags += grid
                self._flag_images += 1
        self.model = r.model_name
        self._tokens = int(r.attentions.shape[-1])
        self.n += 1

    def stats(self) -> DatasetStats:
        import numpy as np

        if self.n == 0:
            raise ValueError("no image could be analysed: there are no statistics to write")
        out = {}
        for k in ("distance", "entropy"):
            mean = self._sum[k] / self.n
            var = (self._sq[k] - self.n * mean * mean) / (self.n - 1) if self.n > 1 else np.zeros_like(mean)
            out[k] = (mean, np.sqrt(np.clip(var, 0.0, None)))
        freq = None if self._flags is None or not self._flag_images else self._flags / self._flag_images
        return DatasetStats(model=self.model, images=self.n, distance_mean=out["distance"][0],
                            distance_sd=out["distance"][1], entropy_mean=out["entropy"][0],
                            entropy_sd=out["entropy"][1], artefact_frequency=freq,
                            artefact_images=self._flag_images, num_tokens=self._tokens)


@dataclass
class StatsRun:
    """What :func:`compute_stats` did: the statistics, the failures ``(path, message)`` and the seconds taken."""

    stats: DatasetStats | None
    failures: list[tuple[str, str]]
    seconds: float
    interrupted: bool = False


def compute_stats(pipeline: Any, images: Sequence[InputImage], *, batch_size: int = 16, quiet: bool = True,
                  log: Callable[[str], None] | None = None) -> StatsRun:
    """The statistics of ``images`` (bad images are reported through ``log`` and skipped)."""
    from vitviz.batch.export import _error_text
    from vitviz.document.session import Session

    acc = StatsAccumulator()
    failures: list[tuple[str, str]] = []
    t0 = time.perf_counter()
    bar = progress_bar(len(images), "stats", quiet=quiet)
    say = log or (lambda line: bar.write(line, file=sys.stderr))
    interrupted = False
    try:
        for batch in stream_batches(pipeline, images, batch_size):
            ok = [lo for lo in batch if lo.prepared is not None]
            for lo in batch:
                if lo.error is not None:
                    failures.append((lo.item.path, _error_text(lo.error, lo.item.path)))
                    say(f"vitviz stats: error: {failures[-1][1]}")
            results: list[Any] = []
            if ok:
                try:
                    results = pipeline.run_batch([lo.prepared for lo in ok], sources=[lo.item.path for lo in ok],
                                                 gradients=False)
                except Exception:  # noqa: BLE001 - find the image at fault: each alone
                    results = []
                    for lo in ok:
                        try:
                            results += pipeline.run_batch([lo.prepared], sources=[lo.item.path], gradients=False)
                        except Exception as e:  # noqa: BLE001 - reported, the others go on
                            results.append(None)
                            failures.append((lo.item.path, _error_text(e, lo.item.path)))
                            say(f"vitviz stats: error: {failures[-1][1]}")
            for lo, r in zip(ok, results):
                if r is None:
                    continue
                s = Session()
                s.set_result(r)
                try:
                    acc.add(s)
                except ValueError as e:
                    failures.append((lo.item.path, _error_text(e, lo.item.path)))
                    say(f"vitviz stats: error: {failures[-1][1]}")
            bar.update(len(batch))
    except KeyboardInterrupt:
        interrupted = True
    finally:
        bar.close()
    return StatsRun(acc.stats() if acc.n else None, failures, time.perf_counter() - t0, interrupted)


# ----------------------------------------------------------------------------------------------- CSV
def _csv_bytes(header: Sequence[str], rows: list[list[Any]]) -> bytes:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header)
    w.writerows(rows)
    return buf.getvalue().encode("utf-8")


def _num(x: float) -> str:
    return f"{float(x):.6g}"


def stats_rows(stats: DatasetStats) -> list[list[Any]]:
    L, H = stats.distance_mean.shape
    return [[stats.model, stats.images, layer, head, _num(stats.distance_mean[layer, head]),
             _num(stats.distance_sd[layer, head]), _num(stats.entropy_mean[layer, head]),
             _num(stats.entropy_sd[layer, head])] for layer in range(L) for head in range(H)]


def artefact_rows(stats: DatasetStats) -> list[list[Any]]:
    f = stats.artefact_frequency
    if f is None:
        return []
    n = stats.artefact_images
    return [[stats.model, n, r, c, _num(f[r, c]), int(round(f[r, c] * n))] for r in range(f.shape[0])
            for c in range(f.shape[1])]


def read_stats_csv(path: str | os.PathLike) -> DatasetStats:
    """The per-layer-and-head statistics of an ``attention_stats.csv`` (the artefact frequency is not in it).

    Raises:
        ValueError: naming the file and what is wrong (not such a CSV, missing columns, layers or heads missing).
    """
    import numpy as np

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8-sig")
    except UnicodeDecodeError:
        raise ValueError(f"{p}: not a text file (expected the attention_stats.csv of 'vitviz stats')") from None
    except OSError as e:
        raise ValueError(f"{p}: cannot read ({e.strerror or e})") from None
    rows = list(csv.DictReader(io.StringIO(text)))
    missing = [c for c in STATS_COLUMNS if not rows or c not in rows[0]]
    if missing:
        raise ValueError(f"{p}: not an attention_stats.csv of 'vitviz stats' (missing columns: "
                         f"{', '.join(missing)})")
    try:
        cells = {(int(r["layer"]), int(r["head"])): r for r in rows}
        L = max(k[0] for k in cells) + 1
        H = max(k[1] for k in cells) + 1
        if len(cells) != L * H or min(min(k) for k in cells) < 0:
            raise ValueError("layers or heads are missing")
        arrays = {c: np.array([[float(cells[(l, h)][c]) for h in range(H)] for l in range(L)])
                  for c in STATS_COLUMNS[4:]}
        images = int(rows[0]["images"])
    except (KeyError, ValueError) as e:
        raise ValueError(f"{p}: not a complete attention_stats.csv ({e})") from None
    return DatasetStats(model=rows[0]["model"], images=images, distance_mean=arrays["mean_distance_px"],
                        distance_sd=arrays["sd_distance_px"], entropy_mean=arrays["mean_entropy_nats"],
                        entropy_sd=arrays["sd_entropy_nats"])


# ----------------------------------------------------------------------------------------------- the figure
def head_colours(H: int) -> list[tuple[float, float, float]]:
    """One colour per head (matplotlib's tab10 / tab20; an evenly spaced hue wheel beyond 20 heads)."""
    from matplotlib import colormaps

    if H <= 10:
        cmap = colormaps["tab10"]
        return [tuple(cmap(i)[:3]) for i in range(H)]
    if H <= 20:
        cmap = colormaps["tab20"]
        return [tuple(cmap(i)[:3]) for i in range(H)]
    cmap = colormaps["hsv"]
    return [tuple(cmap(i / H)[:3]) for i in range(H)]


def stats_figure(stats: DatasetStats):
    """A matplotlib Figure (no pyplot): (a) mean attention distance and (b) attention entropy against the layer,
    one colour per head, error bars = one standard deviation over the images; (c) how often each patch position is
    flagged as a high-norm token."""
    import numpy as np
    from matplotlib.figure import Figure

    L, H = stats.num_layers, stats.num_heads
    has_art = stats.artefact_frequency is not None
    fig = Figure(figsize=(13.5 if has_art else 9.5, 4.3), layout="constrained")
    axes = fig.subplots(1, 3 if has_art else 2, width_ratios=[1, 1, 0.8] if has_art else [1, 1])
    colours = head_colours(H)
    offsets = (np.arange(H) - (H - 1) / 2) * (0.5 / max(H, 1))
    for ax, mean, sd, what, unit in ((axes[0], stats.distance_mean, stats.distance_sd,
                                      "Mean attention distance", "mean attention distance (input px)"),
                                     (axes[1], stats.entropy_mean, stats.entropy_sd,
                                      "Attention entropy", "mean attention entropy (nats)")):
        for h in range(H):
            ax.errorbar(np.arange(L) + offsets[h], mean[:, h], yerr=sd[:, h], fmt="o", ms=3.5, lw=0.8,
                        capsize=1.5, color=colours[h], label=f"head {h}")
        ax.set_xlabel("network depth (layer)")
        ax.set_ylabel(unit)
        ax.set_xticks(range(L))
        ax.set_xlim(-0.6, L - 0.4)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.25)
        ax.set_title(f"{what} per head · {stats.images} image{'s' * (stats.images != 1)}", fontsize=10)
    if stats.num_tokens > 1:
        top = math.log(stats.num_tokens)
        axes[1].axhline(top, color="0.4", lw=0.8, ls="--", label=f"uniform attention (ln {stats.num_tokens})")
        high = float(np.nanmax(stats.entropy_mean + stats.entropy_sd)) if stats.entropy_mean.size else top
        axes[1].set_ylim(0, max(top, high) * 1.06)  # the line below the frame, not on it
    handles, labels = axes[1].get_legend_handles_labels()
    ncol = 1 if len(labels) <= 13 else 2
    axes[1].legend(handles, labels, fontsize=7, ncol=ncol, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                   title="mean ± 1 sd over images", title_fontsize=7, frameon=False)
    if has_art:
        ax = axes[2]
        f = stats.artefact_frequency
        from matplotlib.ticker import MaxNLocator

        top = float(f.max())
        im = ax.imshow(f, cmap="magma", vmin=0.0, vmax=top if top > 0 else 1.0, interpolation="nearest")
        ax.set_xlabel("patch column")
        ax.set_ylabel("patch row")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(f"High-norm (artefact) tokens · {stats.artefact_images} images", fontsize=10)
        if top <= 0:
            ax.text(0.5, 0.5, "no patch flagged\nin any image", transform=ax.transAxes, ha="center", va="center",
                    color="white", fontsize=9)
        cb = fig.colorbar(im, ax=ax, shrink=0.85)
        cb.set_label("fraction of images flagged")
    fig.suptitle(f"{stats.model}: attention statistics over {stats.images} image{'s' * (stats.images != 1)}",
                 fontsize=11)
    return fig


def figure_bytes(stats: DatasetStats, fmt: str) -> bytes:
    """The figure as PNG (150 dpi) or SVG (text as text) bytes."""
    import matplotlib

    fig = stats_figure(stats)
    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "vitviz", "font.family": "DejaVu Sans"}):
        fig.savefig(buf, format=fmt, dpi=150, metadata={"Date": None} if fmt == "svg" else None)
    return buf.getvalue()


# ----------------------------------------------------------------------------------------------- writing
def write_outputs(stats: DatasetStats, out: str | os.PathLike, *, overwrite: bool = False) -> list[Path]:
    """The two CSVs and the figure (PNG, SVG) in ``out`` (created if missing), each written atomically; nothing is
    written when any of them exists and ``overwrite`` is False."""
    from vitviz.imaging import ExportError, write_atomic

    folder = Path(out)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        from vitviz._util.files import describe_os_error

        raise ExportError(folder, f"cannot create the output folder ({describe_os_error(e)})") from None
    files = {folder / STATS_CSV: lambda: _csv_bytes(STATS_COLUMNS, stats_rows(stats)),
             folder / f"{FIGURE}.png": lambda: figure_bytes(stats, "png"),
             folder / f"{FIGURE}.svg": lambda: figure_bytes(stats, "svg")}
    if stats.artefact_frequency is not None:
        files[folder / ARTEFACT_CSV] = lambda: _csv_bytes(ARTEFACT_COLUMNS, artefact_rows(stats))
    check_targets(list(files), overwrite=overwrite)
    written = []
    for path, make in files.items():
        data = make()
        written.append(write_atomic(path, lambda fh, d=data: fh.write(d), overwrite=overwrite,
                                    suffix=path.suffix + ".tmp"))
    return written


def check_targets(paths: Sequence[Path], *, overwrite: bool) -> None:
    """Refuse, before any work, outputs that exist (without ``overwrite``) or are folders."""
    from vitviz.imaging import ExportError

    for p in paths:
        if p.is_dir():
            raise ExportError(p, "a folder of that name exists")
        if not overwrite and (p.exists() or p.is_symlink()):
            raise FileExistsError(f"{p} already exists (pass --overwrite to replace it)")


# ----------------------------------------------------------------------------------------------- the command
def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``vitviz stats`` (the model's load options and ``--debug`` are added by :mod:`vitviz.cli`)."""
    add_common_arguments(p, f"output folder for {STATS_CSV}, {ARTEFACT_CSV} and {FIGURE}.png/.svg")


def run_cli(args: argparse.Namespace, report: Callable[[BaseException, str | None], int], load: Callable) -> int:
    """``vitviz stats``: returns the exit status (0; 2: could not run or no image could be read; 64 + n: n images
    failed; 130: interrupted, nothing written)."""
    from vitviz.devices import precision_reason
    from vitviz.batch.export import FAILED_BASE, MAX_FAILED_STATUS
    from vitviz.pipeline import Pipeline

    device = check_device(args.device, args.precision, args.batch_size)
    out = Path(args.out)
    targets = [out / STATS_CSV, out / ARTEFACT_CSV, out / f"{FIGURE}.png", out / f"{FIGURE}.svg"]
    check_targets(targets, overwrite=args.overwrite)  # before minutes of work
    images, status = inputs_for_cli(args.inputs, report)
    if not images:
        return 2
    model = load(args, args.model)
    pipeline = Pipeline(model, device=device, precision=args.precision)

    def log(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    log(f"vitviz stats: {len(images)} image(s); {getattr(pipeline.spec, 'name', 'model')} on {device}, "
        f"{precision_reason(pipeline.precision_choice, device)}; batch {args.batch_size}")
    run = compute_stats(pipeline, images, batch_size=args.batch_size, quiet=args.quiet,
                        log=None if not args.quiet else log)
    if run.interrupted:
        log("vitviz stats: interrupted; nothing written")
        return 130
    if run.stats is None:
        raise ValueError(f"none of the {len(images)} image(s) could be analysed")
    written = write_outputs(run.stats, out, overwrite=args.overwrite)
    log(f"vitviz stats: {run.stats.images} image(s), {len(run.failures)} failed, in {run.seconds:.1f} s; wrote "
        + ", ".join(str(p) for p in written))
    n = len(run.failures)
    return FAILED_BASE + min(n, MAX_FAILED_STATUS) if n else status
