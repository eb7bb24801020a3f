"""vitviz.document.streamed: the maps of many images made from streamed passes (every layer's attention seen once,
never stored): what a pass must gather for the maps asked for (:mod:`~vitviz.document.streamed.demands`), one
image's result and maps and a session serving them (:mod:`~vitviz.document.streamed.streamed_maps`), and images
through passes in a batch size that fits the memory (:mod:`~vitviz.document.streamed.batches`). Used by ``vitviz
export``, ``stats`` and ``evaluate``; the window keeps every layer (it switches layers without a new pass). No Qt.
"""

from __future__ import annotations

from vitviz.document.streamed.batches import BatchSizer, Demands, shape_of_result, stream_images
from vitviz.document.streamed.demands import NotStreamable, StreamPlan, plan_streaming
from vitviz.document.streamed.streamed_maps import StreamedImage, StreamedSession

__all__ = ["BatchSizer", "Demands", "NotStreamable", "StreamPlan", "StreamedImage", "StreamedSession",
           "plan_streaming", "shape_of_result", "stream_images"]
