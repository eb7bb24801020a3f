"""The named choices of the analyses, without torch: the option table (vitviz.views.options) and the window import
them from here, so that each list is written once. No Qt."""

from __future__ import annotations

FUSIONS: tuple[str, ...] = ("mean", "max", "min")  # how the heads are fused (or reduced for display)
CLAMPS: tuple[str, ...] = ("after_mean", "before_mean")  # where the gradient rollout clamps negative values
UPSAMPLE_MODES: tuple[str, ...] = ("nearest", "bilinear")  # from the patch grid to pixels
