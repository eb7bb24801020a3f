"""vitviz.capture.streaming: one pass of a vitviz ViT whose per-layer tensors go to observers as the pass goes
(forward in layer order, backward from the last layer), so that the memory holds about one layer's attention instead
of every layer's (:mod:`~vitviz.capture.streaming.passes`), and the memory such a pass takes
(:mod:`~vitviz.capture.streaming.budget`). No Qt.
"""

from __future__ import annotations

from vitviz.capture.streaming.budget import FILL, fit_batch, graph_fits, is_out_of_memory, pass_bytes
from vitviz.capture.streaming.passes import StreamedPass, stream_pass, streamable

__all__ = ["FILL", "StreamedPass", "fit_batch", "graph_fits", "is_out_of_memory", "pass_bytes", "stream_pass",
           "streamable"]
