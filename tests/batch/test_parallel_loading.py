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
    """``prepare`` in a random time (workers finish out of order); counts what was started, and how many at once."""

    def __init__(self, delay: float = 0.02, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.delay = delay
        self.started: list[str] = []
        self.lock = threading.Lock()
        self.running = self.most = 0
        self.device = "cpu"

    def prepare(self, image):
        with self.lock:
            self.started.append(str(image.path))
            self.running += 1
            self.most = max(self.most, self.running)
            pause = float(self.rng.random()) * self.delay
        time.sleep(pause)
        with self.lock:
            self.running -= 1
        return ("prepared", Path(image.path).name)


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
    pipe = SlowPipe()
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
    items = _folder(tmp_path, 30)
    pipe = SlowPipe(delay=0.001)
    it = stream_batches(pipe, items, 3, workers=3)
    first = next(it)
    time.sleep(0.3)  # the workers have time to run ahead as far as they may
    assert len(first) == 3 and len(pipe.started) <= 3 + 2 * 3
    it.close()
    time.sleep(0.1)
    count = len(pipe.started)
    time.sleep(0.2)
    assert len(pipe.started) == count < 30  # closing cancelled what was queued


def test_stopping_early_does_not_wait_for_slow_images(tmp_path):
    items = _folder(tmp_path, 12)
    pipe = SlowPipe(delay=0.5)
    t = time.perf_counter()
    for _batch in stream_batches(pipe, items, 2, workers=2):
        break
    assert time.perf_counter() - t < 2.0


def test_worker_counts(tmp_path):
    assert 1 <= default_workers("cpu") <= 2 and default_workers("cuda:0") >= default_workers("cpu")
    items = _folder(tmp_path, 3)
    with pytest.raises(ValueError, match="workers"):
        list(stream_batches(SlowPipe(), items, 2, workers=0))
    one = list(stream_batches(SlowPipe(), items, 2, workers=1))
    assert [lo.item for b in one for lo in b] == items
