"""How a batch job turns a batch of preprocessed images into results: streamed passes where the model and the maps
asked for allow (:func:`vitviz.document.streamed.stream_images`: one layer's attention in memory at a time), else the
stored capture (:meth:`vitviz.pipeline.Pipeline.run_batch`), in a batch size that adapts to the memory available
(:class:`vitviz.document.streamed.BatchSizer`: fewer images at once when the estimate says so, half as many after
an out-of-memory error, each said once). ``vitviz export``, ``stats`` and ``evaluate`` share it. No Qt.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from vitviz.capture import check_capture_memory
from vitviz.capture.streaming import is_out_of_memory, streamable
from vitviz.document.session import Session
from vitviz.document.streamed import BatchSizer, Demands, NotStreamable, StreamedImage, StreamedSession, stream_images
from vitviz.pipeline import Pipeline

__all__ = ["BatchPasses", "result_of"]


def result_of(item: Any) -> Any:
    """The :class:`~vitviz.pipeline.InferenceResult` of what :meth:`BatchPasses.run` gave for one image."""
    return item.result if isinstance(item, StreamedImage) else item


class BatchPasses:
    """Batches of images through the model, streamed when possible.

    Args:
        pipeline: the :class:`~vitviz.pipeline.Pipeline`.
        batch_size: images per pass asked for (fewer when the memory says so).
        target, gradients: as :meth:`~vitviz.pipeline.Pipeline.run_batch`.
        demands: the maps wanted of each result (:data:`vitviz.document.streamed.Demands`).
        statistics: measure attention distance and entropy (``vitviz stats``).
        streaming: None: streamed when the pipeline is a :class:`~vitviz.pipeline.Pipeline` of a model that can be
            (:func:`vitviz.capture.streaming.streamable`; anything else that offers ``run_batch`` is called as it
            is); False: the stored capture always; True: streamed, an error when it cannot be.
        note: told once each time the route or the batch size changes (``"vitviz export: note: ..."``).

    Attributes:
        keep_graph: how a streamed backward treats the blocks' graphs (:func:`vitviz.document.streamed.stream_images`:
            None chooses by the memory available; True keeps them, False recomputes each block).
    """

    def __init__(self, pipeline: Any, *, batch_size: int, target: Any = None, gradients: bool = True,
                 demands: Demands | None = None, statistics: bool = False, streaming: bool | None = None,
                 note: Callable[[str], None] | None = None, keep_graph: bool | None = None):
        self.pipeline = pipeline
        self.target = target
        self.gradients = bool(gradients)
        self.demands = demands
        self.statistics = bool(statistics)
        self.note = note or (lambda line: None)
        self.sizer = BatchSizer(batch_size, note=self.note)
        self.keep_graph = keep_graph
        why = streamable(pipeline.model) if isinstance(pipeline, Pipeline) else \
            f"{type(pipeline).__name__} is not a vitviz Pipeline"
        if streaming and why:
            raise NotStreamable(why)
        self.streaming = why is None if streaming is None else bool(streaming)

    @property
    def route(self) -> str:
        """``"streamed"`` or ``"stored"`` (the route of the next batch)."""
        return "streamed" if self.streaming else "stored"

    def run(self, prepared: Sequence[Any], sources: Sequence[str]) -> list[Any]:
        """One :class:`~vitviz.document.streamed.StreamedImage` (streamed) or
        :class:`~vitviz.pipeline.InferenceResult` (stored) per image, in order."""
        if self.streaming:
            try:
                return stream_images(self.pipeline, prepared, sources=sources, target=self.target,
                                     gradients=self.gradients, demands=self.demands, statistics=self.statistics,
                                     sizer=self.sizer, keep_graph=self.keep_graph)
            except NotStreamable as e:
                self.streaming = False
                self.note(f"every layer's attention is stored for each batch ({e})")
        return self._stored(list(prepared), list(sources))

    def _stored_size(self, prepared: list[Any]) -> int:
        """The largest batch up to the limit whose stored capture passes the capture's memory check."""
        m = self.pipeline.model
        size = min(self.sizer.limit, len(prepared))
        try:
            grid = m.patch_embed.check_input(prepared[0].x[None])
            L, H = len(m.blocks), int(m.blocks[0].attn.num_heads)
            N = int(m.num_prefix_tokens) + int(grid[0]) * int(grid[1])
        except (AttributeError, TypeError, ValueError, IndexError):  # an adapted module: its capture checks itself
            return size
        start = size
        while size > 1:
            try:
                check_capture_memory(L, size, H, N, grads=self.gradients, device=self.pipeline.device)
                break
            except Exception:  # noqa: BLE001 - CaptureError: too big; try half as many
                size //= 2
        if size < start:
            self.sizer.limit = size
            self.sizer.note(f"storing every layer's attention of {start} image(s) at once would not fit in the "
                            f"memory available: batches of {size}")
        return size

    def _stored(self, prepared: list[Any], sources: list[str]) -> list[Any]:
        out: list[Any] = []
        size = self._stored_size(prepared) if prepared else 1
        targets = self.target if isinstance(self.target, (list, tuple)) else None
        i = 0
        while i < len(prepared):
            chunk = slice(i, i + size)
            target = targets[chunk] if targets is not None else self.target
            try:
                out += self.pipeline.run_batch(prepared[chunk], sources=sources[chunk], target=target,
                                               gradients=self.gradients)
            except Exception as e:  # noqa: BLE001 - out of memory: fewer at once; anything else goes up
                if not is_out_of_memory(e) or size == 1:
                    raise
                size = self.sizer.halve(size, e)
                continue
            i += size
        return out

    def session(self, item: Any) -> Session:
        """A session showing one image of :meth:`run` (a :class:`~vitviz.document.streamed.StreamedSession` for a
        streamed one)."""
        if isinstance(item, StreamedImage):
            return StreamedSession(item)
        s = Session()
        s.set_result(item)
        return s
