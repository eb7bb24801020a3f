"""Images read and preprocessed in worker threads (vitviz.batch.inputs.stream_batches): in the input order whatever
order the workers finish in, a bad image yielded in its place with its error, at most two batches read ahead, and a
consumer that stops early leaves no work queued and does not wait for it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from vitviz.batch.inputs import InputImage, default_workers, stream_batches
from vitviz.imaging import ImageError


class SlowPipe:
    """``prepare`` in a random time (workers finish out of order); counts what was started, and how many at once.
    ``overlap``: the first call waits (up to a minute) until a second one runs beside it, so that "read in parallel"
    is a fact of the code, not of how busy the machine is. ``hold``: the images after the first ``free`` (in the
    input order) wait for it.
    The minute-long waits only bound a hang; no assertion depends on how fast anything runs."""

    def __init__(self, delay: float = 0.02, seed: int = 0, overlap: bool = False, free: int | None = None):
        self.rng = np.random.default_rng(seed)
        self.delay = delay
        self.started: list[str] = []
        self.lock = threading.Lock()
        self.running = self.most = 0
        self.device = "cpu"
        self.second = threading.Event() if overlap else None
        self.free = free
        self.hold = threading.Event()

    def prepare(self, image):
        with self.lock:
            self.started.append(str(image.path))
            n = len(self.started)
            self.running += 1
            self.most = max(self.most, self.running)
            pause = float(self.rng.random()) * self.delay
        if self.second is not None:
            if n == 1:
                self.second.wait(60)
            else:
                self.second.set()
        if self.free is not None and int(Path(image.path).stem[2:]) >= self.free:  # by input order, not start order:
            self.hold.wait(60)  # (a worker may start image 3 before another has started image 2 on a busy machine)
        time.sleep(pause)
        with self.lock:
            self.running -= 1
        return ("prepared", Path(image.path).name)


def _loaders_ended(wait_s: float = 60.0) -> bool:
    """Wait (up to ``wait_s``: a bound against a hang, not a timing) until no image-reading thread is left."""
    deadline = time.monotonic() + wait_s
    while any(t.name.startswith("vitviz-loader") for t in threading.enumerate()):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def _folder(tmp_path: Path, n: int, bad: tuple[int, ...] = ()) -> list[InputImage]:
    items = []
    for i in range(n):
        p = tmp_path / f"im{i:02d}.png"
        if i in bad:
            p.write_bytes(b"not a png")
        else:
            Image.new("RGB", (8, 8), (i, 0, 0)).save(p)
        items.append(InputImage(str(p), p.stem))
    return items


def test_order_is_kept_whatever_order_the_workers_finish_in(tmp_path):
    items = _folder(tmp_path, 23, bad=(5, 17))
    pipe = SlowPipe(overlap=True)
    batches = list(stream_batches(pipe, items, 4, workers=4))
    assert [len(b) for b in batches] == [4, 4, 4, 4, 4, 3]
    flat = [lo for b in batches for lo in b]
    assert [lo.item for lo in flat] == items
    for i, lo in enumerate(flat):
        if i in (5, 17):
            assert lo.prepared is None and isinstance(lo.error, ImageError) and items[i].path in str(lo.error)
        else:
            assert lo.error is None and lo.prepared == ("prepared", f"im{i:02d}.png") and lo.load_s > 0
    assert pipe.most > 1  # the images were read in parallel


def test_reading_stays_two_batches_ahead(tmp_path):
    """Once the first batch is handed out, exactly two more batches are read (none beyond, however long the consumer
    takes); closing the generator starts nothing more."""
    items = _folder(tmp_path, 30)
    pipe = SlowPipe(delay=0.001)
    it = stream_batches(pipe, items, 3, workers=3)
    first = next(it)
    deadline = time.monotonic() + 60
    while len(pipe.started) < 3 + 2 * 3 and time.monotonic() < deadline:  # the workers run ahead as far as they may
        time.sleep(0.01)
    assert len(first) == 3 and len(pipe.started) == 3 + 2 * 3
    it.close()
    assert _loaders_ended()
    assert len(pipe.started) == 3 + 2 * 3 < 30  # nothing started after the close


def test_stopping_early_does_not_wait_for_slow_images(tmp_path):
    """The consumer stops after the first batch while the images read ahead are still blocked: the close returns
    without them (it would wait forever for them otherwise)."""
    items = _folder(tmp_path, 12)
    pipe = SlowPipe(delay=0.0, free=2)
    closed = threading.Event()

    def consume():
        for _batch in stream_batches(pipe, items, 2, workers=2):
            deadline = time.monotonic() + 60
            while len(pipe.started) < 3 and time.monotonic() < deadline:  # an image read ahead is blocked now
                time.sleep(0.01)
            break
        closed.set()

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    try:
        assert closed.wait(60), "closing the batches waited for the images still being read"
        assert pipe.running > 0  # they were still blocked when the close returned
    finally:
        pipe.hold.set()
        t.join(60)
    assert _loaders_ended()
    assert len(pipe.started) <= 2 + 2 * 2


def test_worker_counts(tmp_path):
    assert 1 <= default_workers("cpu") <= 2 and default_workers("cuda:0") >= default_workers("cpu")
    items = _folder(tmp_path, 3)
    with pytest.raises(ValueError, match="workers"):
        list(stream_batches(SlowPipe(), items, 2, workers=0))
    one = list(stream_batches(SlowPipe(), items, 2, workers=1))
    assert [lo.item for b in one for lo in b] == items
