"""``vitviz stats``: attention statistics over a set of images, as the ViT paper's Fig. 7 (right) plots them. No Qt.

Per layer and head, over the images: the mean attention distance in input pixels (Dosovitskiy et al. 2020, Fig. 7
right: averaged over 128 images there) and the mean attention entropy in nats, each as the mean and the standard
deviation over the images; and per patch position, the share of images in which the token there is flagged as a
high-norm "artefact" token (Darcet et al. 2023; :func:`vitviz.analysis.high_norm_tokens` with the window's defaults).

Each image's numbers are the window's own: its result goes into a :class:`~vitviz.document.session.Session`, which
gives ``mean_distances()``, ``entropies()`` and ``artefact_grid()`` exactly as the plots panel and the canvas show
them (for a streamed pass, :class:`~vitviz.document.streamed.StreamedSession`: the same numbers, measured layer by
layer as the pass goes). The images stream through :func:`vitviz.batch.inputs.stream_batches` and
:class:`vitviz.batch.batch_passes.BatchPasses` (forward only: no statistic needs a gradient; streamed where the model
allows, so one layer's attention is in memory at a time), and only running sums are kept, so the memory does not
grow with the number of images. The sums are exact (:mod:`vitviz.batch.fixed_point`):
a shard saves them (``attention_stats-K-of-N.npz``, :mod:`vitviz.batch.stats_files`) and ``vitviz merge`` adds the
shards' sums, giving the numbers of one run over all the images, bit for bit.

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
from vitviz.batch.fixed_point import FixedSum, mean_and_sd
from vitviz.batch.inputs import InputImage, progress_bar, stream_batches

STATS_CSV = "attention_stats.csv"
ARTEFACT_CSV = "artefact_frequency.csv"
FIGURE = "attention_stats"  # .png and .svg
STATS_COLUMNS = ("model", "images", "layer", "head", "mean_distance_px", "sd_distance_px", "mean_entropy_nats",
                 "sd_entropy_nats", "precision")
STATS_NUMBERS = STATS_COLUMNS[4:8]  # the statistics; "precision" (fp32, bf16, fp16) says what they were computed in
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
        precision: what the model computed in (``"fp32"``, ``"bf16"``, ``"fp16"``; "" when unknown), said in the
            CSV's ``precision`` column and the figure's title: bf16 statistics differ from fp32 ones in the second or
            third digit.
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
    precision: str = ""

    def nan_note(self) -> str:
        """``""`` or what is nan: ``"; 4 of 12 layer x head cells are nan (...)"`` (an image's attention there was
        not finite: NaN or infinite values in the model's weights or the input)."""
        nan = np.isnan(self.distance_mean) | np.isnan(self.entropy_mean)
        if not nan.any():
            return ""
        return (f"; {int(nan.sum())} of {nan.size} layer x head cells are nan (an image's attention there was not "
                "finite: NaN or infinite values in the model's weights?)")

    @property
    def num_layers(self) -> int:
        return int(self.distance_mean.shape[0])

    @property
    def num_heads(self) -> int:
        return int(self.distance_mean.shape[1])


@dataclass
class GridFlags:
    """How often each patch position was flagged, over the images on one patch grid: ``flags`` ``[gh, gw]`` int64
    counts, ``images`` counted, ``first`` the input-list index of the first of them."""

    flags: np.ndarray
    images: int = 0
    first: int = 0


class StatsAccumulator:
    """Exact running sums of per-image statistics: :meth:`add` one :class:`~vitviz.document.session.Session`
    (holding an image's result) at a time, :meth:`add_shard` another accumulator (a shard's), :meth:`stats` at any
    point.

    The sums are exact (:class:`~vitviz.batch.fixed_point.FixedSum`: integers, whatever the order), so the
    statistics of shards merged equal those of one run over all the images bit for bit, and every other number is
    a count or is taken from the image with the lowest (the patch grid of the artefact frequency) or highest (model
    name, tokens) place in the input list, wherever it was counted. No statistic here needs the per-image values (a
    median would; there is none).

    Attributes:
        n: images added.
        sums, squares: ``"distance"`` / ``"entropy"`` -> the exact sums of the ``[L, H]`` values and their squares.
        grids: ``(gh, gw)`` -> :class:`GridFlags`.
        last: ``(index, model name, tokens)`` of the image with the highest index.
    """

    def __init__(self) -> None:
        self.n = 0
        self.sums: dict[str, FixedSum] = {}
        self.squares: dict[str, FixedSum] = {}
        self.grids: dict[tuple[int, int], GridFlags] = {}
        self.last: tuple[int, str, int] = (-1, "model", 0)

    @property
    def model(self) -> str:
        return self.last[1]

    def add(self, session: Any, index: int | None = None) -> None:
        """Add the image whose result ``session`` holds (its distances, entropies and flagged patches); ``index``:
        its place in the whole input list (default: the number of images added before it)."""
        r = session.result
        index = self.n if index is None else int(index)
        values = {"distance": np.asarray(session.mean_distances(), np.float64),
                  "entropy": np.asarray(session.entropies(), np.float64)}
        if self.n and values["distance"].shape != self.sums["distance"].shape:
            raise ValueError(f"{r.source}: {values['distance'].shape[0]} layers x {values['distance'].shape[1]} "
                             f"heads, but the first image had {self.sums['distance'].shape}")
        for k, v in values.items():
            if self.n == 0:
                self.sums[k], self.squares[k] = FixedSum(v.shape), FixedSum(v.shape)
            self.sums[k].add(v)
            self.squares[k].add(v * v)
        grid = session.artefact_grid()
        if grid is not None:
            g = self.grids.setdefault(tuple(grid.shape), GridFlags(np.zeros(grid.shape, np.int64), 0, index))
            g.flags += np.asarray(grid, np.int64)
            g.images += 1
            g.first = min(g.first, index)
        if index >= self.last[0]:
            self.last = (index, r.model_name, int(r.attentions.shape[-1]))
        self.n += 1

    def add_shard(self, other: StatsAccumulator) -> None:
        """Add the images another accumulator (a shard's) counted: exact, in any order."""
        if not other.n:
            return
        if self.n and other.sums["distance"].shape != self.sums["distance"].shape:
            raise ValueError(f"{other.sums['distance'].shape[0]} layers x {other.sums['distance'].shape[1]} heads, "
                             f"but the first part had {self.sums['distance'].shape}")
        for k in ("distance", "entropy"):
            if self.n == 0:
                self.sums[k], self.squares[k] = FixedSum(other.sums[k].shape), FixedSum(other.sums[k].shape)
            self.sums[k].add_sum(other.sums[k])
            self.squares[k].add_sum(other.squares[k])
        for shape, g in other.grids.items():
            mine = self.grids.setdefault(shape, GridFlags(np.zeros(shape, np.int64), 0, g.first))
            mine.flags += g.flags
            mine.images += g.images
            mine.first = min(mine.first, g.first)
        if other.last[0] >= self.last[0]:
            self.last = other.last
        self.n += other.n

    def stats(self) -> DatasetStats:
        if self.n == 0:
            raise ValueError("no image could be analysed: there are no statistics to write")
        out = {k: mean_and_sd(self.sums[k], self.squares[k], self.n) for k in ("distance", "entropy")}
        freq, counted = None, 0
        if self.grids:  # the grid of the first image of the input list that has one
            g = min(self.grids.values(), key=lambda x: x.first)
            if g.images:
                freq, counted = g.flags / g.images, g.images
        return DatasetStats(model=self.model, images=self.n, distance_mean=out["distance"][0],
                            distance_sd=out["distance"][1], entropy_mean=out["entropy"][0],
                            entropy_sd=out["entropy"][1], artefact_frequency=freq,
                            artefact_images=counted, num_tokens=self.last[2])


@dataclass
class StatsRun:
    """What :func:`compute_stats` did: the statistics, the failures ``(path, message)``, the seconds taken and the
    accumulator (what a shard saves for ``vitviz merge``)."""

    stats: DatasetStats | None
    failures: list[tuple[str, str]]
    seconds: float
    interrupted: bool = False
    accumulator: StatsAccumulator | None = None


def compute_stats(pipeline: Any, images: Sequence[InputImage], *, batch_size: int = 16, quiet: bool = True,
                  log: Callable[[str], None] | None = None, indices: Sequence[int] | None = None,
                  workers: int | None = None) -> StatsRun:
    """The statistics of ``images`` (bad images are reported through ``log`` and skipped); ``indices``: each
    image's place in the whole input list when ``images`` are a shard of it (default: their own order);
    ``workers``: image-reading threads (default :func:`vitviz.batch.inputs.default_workers`)."""
    from vitviz.batch.batch_passes import BatchPasses  # torch: when statistics are computed, not when merged

    acc = StatsAccumulator()
    # streamed passes where the model allows (one layer's attention in memory; the numbers of the stored route)
    passes = BatchPasses(pipeline, batch_size=batch_size, gradients=False, statistics=True,
                         note=lambda m: say(f"vitviz stats: note: {m}"))
    place = {im.rel: i for im, i in zip(images, range(len(images)) if indices is None else indices)}
    failures: list[tuple[str, str]] = []
    t0 = time.perf_counter()
    bar = progress_bar(len(images), "stats", quiet=quiet)
    say = log or (lambda line: bar.write(line, file=sys.stderr))
    interrupted = False
    try:
        for batch in stream_batches(pipeline, images, batch_size, workers=workers):
            ok = [lo for lo in batch if lo.prepared is not None]
            for lo in batch:
                if lo.error is not None:
                    failures.append((lo.item.path, error_text(lo.error, lo.item.path)))
                    say(f"vitviz stats: error: {failures[-1][1]}")
            results: list[Any] = []
            if ok:
                try:
                    results = passes.run([lo.prepared for lo in ok], [lo.item.path for lo in ok])
                except Exception:  # noqa: BLE001 - find the image at fault: each alone
                    results = []
                    for lo in ok:
                        try:
                            results += passes.run([lo.prepared], [lo.item.path])
                        except Exception as e:  # noqa: BLE001 - reported, the others go on
                            results.append(None)
                            failures.append((lo.item.path, error_text(e, lo.item.path)))
                            say(f"vitviz stats: error: {failures[-1][1]}")
            for lo, r in zip(ok, results):
                if r is None:
                    continue
                s = passes.session(r)
                try:
                    acc.add(s, index=place[lo.item.rel])
                except ValueError as e:
                    failures.append((lo.item.path, error_text(e, lo.item.path)))
                    say(f"vitviz stats: error: {failures[-1][1]}")
            bar.update(len(batch))
    except KeyboardInterrupt:
        interrupted = True
    finally:
        bar.close()
    return StatsRun(acc.stats() if acc.n else None, failures, time.perf_counter() - t0, interrupted, acc)

