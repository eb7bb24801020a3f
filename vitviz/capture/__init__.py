"""vitviz.capture: every layer's attention, tokens and attention gradients of one forward pass. No Qt.

:func:`capture` hooks a vitviz ViT (:mod:`vitviz.capture.hooks`) and sends any other ViT module to
:mod:`vitviz.capture.foreign`; both return a :class:`Capture` (:mod:`vitviz.capture.results`) and share the checks of
:mod:`vitviz.capture.preflight`.
"""

from __future__ import annotations

from vitviz.capture.hooks import capture
from vitviz.capture.preflight import available_memory, check_capture_memory
from vitviz.capture.results import Capture, CaptureError, ImageCapture

__all__ = ["Capture", "CaptureError", "ImageCapture", "available_memory", "capture", "check_capture_memory"]
