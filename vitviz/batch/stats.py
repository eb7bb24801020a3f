"""``vitviz stats``: attention statistics over a set of images, as the ViT paper's Fig. 7 (right) plots them. No Qt.

Per layer and head, over the images: the mean attention distance in input pixels (Dosovitskiy et al. 2020, Fig. 7
right: averaged over 128 images there) and the mean attention entropy in nats, each as the mean and the standard
deviation over the images; and per patch position, the share of images in which the token there is flagged as a
high-norm "artefact" token (Darcet et al. 2023; :func:`vitviz.analysis.high_norm_tokens` with the window's defaults).

Each image's numbers are the window's own: its result goes into a :class:`~vitviz.document.session.Session`, which
gives ``mean_distances()``, ``entropies()`` and ``artefact_grid()`` exactly as the plots panel and the canvas show
them. The images stream through :func:`vitviz.batch.inputs.stream_batches` and
:meth:`vitviz.pipeline.Pipeline.run_batch` (forward only: no statistic needs a gradient), and only running sums are
kept, so the memory does not grow with the number of images.

Writes (``--out DIR``; :mod:`vitviz.batch.stats_files`, the figure :mod:`vitviz.batch.stats_plot`):
``attention_stats.csv`` (one row per layer and head), ``artefact_frequency.csv`` (one row per patch position) and
``attention_stats.png`` / ``.svg`` (three panels: distance and entropy against depth, one colour per head with the
spread over images as error bars, and the artefact frequency over the patch grid). The window opens
``attention_stats.csv`` (Plots > Distance > Dataset…) to draw the dataset's curve beside "this image".
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from vitviz.batch.failures import error_text
from vitviz.batch.inputs import InputImage, progress_bar, stream_batches
from vitviz.document.session import Session

STATS_CSV = "attention_stats.csv"
ARTEFACT_CSV = "artefact_frequency.csv"
FIGURE = "attention_stats"  # .png and .svg
STATS_COLUMNS = ("model", "images", "layer", "head", "mean_distance_px", "sd_distance_px", "mean_entropy_nats",
                 "sd_entropy_nats")
ARTEFACT_COLUMNS = ("model", "images", "row", "col", "flagged_fraction", "flagged_images")


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
    """Running sums of per-image statistics (float64): :meth:`add` one :class:`~vitviz.document.session.Session`
    (holding an image's result) at a time, :meth:`stats` at any point."""

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
                    failures.append((lo.item.path, error_text(lo.error, lo.item.path)))
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
                            failures.append((lo.item.path, error_text(e, lo.item.path)))
                            say(f"vitviz stats: error: {failures[-1][1]}")
            for lo, r in zip(ok, results):
                if r is None:
                    continue
                s = Session()
                s.set_result(r)
                try:
                    acc.add(s)
                except ValueError as e:
                    failures.append((lo.item.path, error_text(e, lo.item.path)))
                    say(f"vitviz stats: error: {failures[-1][1]}")
            bar.update(len(batch))
    except KeyboardInterrupt:
        interrupted = True
    finally:
        bar.close()
    return StatsRun(acc.stats() if acc.n else None, failures, time.perf_counter() - t0, interrupted)

