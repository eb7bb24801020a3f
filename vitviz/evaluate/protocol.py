"""The vocabulary of the faithfulness measures: perturbation modes, baselines, the default views, the automatic batch
size's budget, the progress and cancel callbacks and the cancellation error. No torch, no numpy: the CLI's parser and
the window's faithfulness tab import these without importing torch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from vitviz.views.presets import FAITHFULNESS_VIEWS

Mode = Literal["deletion", "insertion", "negative"]
BaselineKind = Literal["mean", "blur", "noise"]
MODES: tuple[str, ...] = ("deletion", "insertion", "negative")
BASELINES: tuple[str, ...] = ("mean", "blur", "noise")
DEFAULT_VIEWS: tuple[str, ...] = FAITHFULNESS_VIEWS
BATCH_BUDGET = 64 * 2**20
"""Bytes of the widest activation (the MLP's hidden layer, ``4 x tokens x 4 D`` per image in float32) that one
batch may hold when ``batch_size`` is None: ViT-B/16 at 224 px gets 27 images per forward, ViT-Ti/16 110, the demo
model the cap of :data:`MAX_AUTO_BATCH`. Small models run several times faster per image in large batches."""
MAX_AUTO_BATCH = 128

Progress = Callable[[int, int], Any]
Cancel = Callable[[], bool]


class EvaluationCancelled(Exception):
    """Raised by the evaluation functions when their ``cancel()`` returned True (checked before every batch)."""


LOCALISATION_METRICS: tuple[str, ...] = ("pixel_accuracy", "miou", "map", "pointing_game", "energy_pointing_game",
                                         "p_miou")
"""The localisation metrics (:mod:`vitviz.evaluate.localisation`), in the CSV's column order; higher is better for
every one."""

IGNORE = -1
"""The value of an ignored pixel in the localisation masks (VOC's 255 border, ImageNet-S's 1000, outside the image)."""
