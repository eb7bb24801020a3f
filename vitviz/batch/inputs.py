"""Headless work over many images: which images (files, folders, globs, lists), which share of them (shards), and a
stream of preprocessed batches read ahead on a loader thread. No Qt.

``vitviz export`` (:mod:`vitviz.batch.export`) and ``vitviz stats`` (:mod:`vitviz.batch.stats`) are built on it:

* :func:`expand_inputs` turns what the user typed into :class:`InputImage` s, each with the path it is read from and
  a name under the output folder that mirrors the input's own folders (``photos/`` -> ``cats/tabby``);
* :func:`take_shard` keeps a deterministic 1/N of them for a job array (each image's shard depends on its output
  name only, not on the order or the machine);
* :func:`stream_batches` reads and preprocesses the images in worker threads (decoding and resampling release the
  GIL), at most two batches ahead of the model, and yields batches of :class:`Loaded` in the input order (an image
  that cannot be read is yielded with its error, never raised), so the memory in flight is a few batches whatever the
  number of images, and decoding keeps up with a GPU.
"""

from __future__ import annotations

import glob
import os
import sys
import time
import zlib
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from tqdm import tqdm

from vitviz.imaging import IMAGE_SUFFIXES, ImageError, load_image

LIST_SUFFIXES = (".txt", ".lst", ".list")
SizeCheck = Callable[[int, int], "str | None"]
"""``check(width, height)`` of an image's header: why its size is refused, or None (``load_image``'s ``check``)."""


@dataclass(frozen=True)
class InputImage:
    """One image of a batch job.

    Attributes:
        path: the file, as found (what is read, and the manifest's ``source``).
        rel: where its outputs go under the output folder, POSIX-style, without a suffix: the path below the folder
            or glob it was found through (``cats/tabby``), the file's stem for a file named directly; ``-jpg`` etc.
            is added when two inputs would otherwise share a name.
    """

    path: str
    rel: str


def _folder_images(d: Path) -> list[Path]:
    """Image files under ``d``, recursively, sorted; hidden files and folders skipped, links to folders not followed."""
    found = []
    for root, dirs, files in os.walk(d, followlinks=False):
        dirs[:] = sorted(x for x in dirs if not x.startswith("."))
        found += [Path(root) / f for f in sorted(files)
                  if not f.startswith(".") and Path(f).suffix.lower() in IMAGE_SUFFIXES]
    return found


def _glob_root(pattern: str) -> Path:
    """The folder part of ``pattern`` before its first wildcard (``data/*/x.png`` -> ``data``)."""
    parts = Path(pattern).parts
    for i, part in enumerate(parts):
        if any(c in part for c in "*?["):
            return Path(*parts[:i]) if i else Path(".")
    return Path(pattern).parent


def _rel(path: Path, root: Path | None) -> str:
    """``path`` below ``root`` without its suffix (POSIX), or the file's stem when it is not below it."""
    if root is not None:
        try:
            r = PurePosixPath(*path.relative_to(root).parts)
            return str(r.with_suffix("")) if r.parts else path.stem
        except ValueError:
            pass
    return path.stem


def _is_list_file(item: str) -> bool:
    return item.startswith("@") or Path(item).suffix.lower() in LIST_SUFFIXES


def _read_list(item: str) -> tuple[list[str], Path]:
    """The entries of a text file of paths (one a line; blank lines and ``#`` comments skipped) and its folder."""
    p = Path(item.removeprefix("@")).expanduser()
    try:
        text = p.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise ImageError(p, "list of images does not exist") from None
    except IsADirectoryError:
        raise ImageError(p, "is a folder, not a list of images") from None
    except UnicodeDecodeError:
        raise ImageError(p, "is not a text file (a list of images has one path a line)") from None
    except OSError as e:
        raise ImageError(p, f"cannot read the list ({e.strerror or e})") from None
    lines = [ln.strip() for ln in text.splitlines()]
    return [ln for ln in lines if ln and not ln.startswith("#")], p.parent


def expand_inputs(items: Sequence[str]) -> tuple[list[InputImage], list[tuple[str, str]]]:
    """Images from files, folders (recursively: files with an image suffix, hidden ones skipped), glob patterns
    (``**`` recurses) and text files listing paths (``.txt``/``.lst``/``.list``, or any file as ``@FILE``; relative
    entries are relative to the list's folder; an entry may itself be a folder or a pattern), in order, each once.

    Returns:
        ``(images, problems)``: ``problems`` holds ``(item, message)`` for a folder without images, a pattern that
        matches nothing or a list that cannot be read. A name that is none of these is kept as a file: reading it
        reports the problem.
    """
    out: dict[str, InputImage] = {}
    problems: list[tuple[str, str]] = []

    def add(path: Path, root: Path | None) -> None:
        key = str(path)
        if key not in out:
            out[key] = InputImage(key, _rel(path, root))

    def expand(item: str, base: Path | None) -> None:
        if base is not None and not Path(item).expanduser().is_absolute():
            text, root_for_file = str(base / item), base
        else:
            text, root_for_file = item, None
        p = Path(text).expanduser()
        if p.is_dir():
            found = _folder_images(p)
            if not found:
                problems.append((item, f"folder {item} holds no image files"))
            for f in found:
                add(f, p)
        elif p.exists() or p.is_symlink() or not any(c in item for c in "*?["):
            # a file named in a list keeps the list's folder structure (when it lies below the list's folder)
            add(p, root_for_file if root_for_file is not None and ".." not in Path(item).parts else None)
        else:
            matches = sorted(glob.glob(str(p), recursive=True))
            root = _glob_root(str(p))
            if not matches:
                problems.append((item, f"no files match {item}"))
            for m in matches:
                mp = Path(m)
                for f in (_folder_images(mp) if mp.is_dir() else [mp]):
                    add(f, root)

    for item in items:
        if _is_list_file(item) and not Path(item).expanduser().is_dir():
            try:
                entries, folder = _read_list(item)
            except ValueError as e:
                problems.append((item, str(e)))
                continue
            if not entries:
                problems.append((item, f"list {item} names no images"))
            for entry in entries:
                expand(entry, folder)
        else:
            expand(item, None)
    return _unique_names(list(out.values())), problems


def inputs_for_cli(items: Sequence[str], report: Callable[[BaseException, str | None], int]
                   ) -> tuple[list[InputImage], int]:
    """:func:`expand_inputs` for a command: each problem reported as one line (``report(error, item)`` returns the
    exit status it stands for). Returns the images and the status so far (0 when nothing was wrong)."""
    images, problems = expand_inputs(items)
    status = 0
    for item, problem in problems:
        status = report(ValueError(problem), item)
    return images, status


def _unique_names(images: list[InputImage]) -> list[InputImage]:
    """Two inputs with the same output name (``a/x.jpg`` and ``a/x.png`` below one root, or two files named ``x``
    given directly) get the suffix added (``x-jpg``), then ``-2``, ``-3``: decided from the whole list, so every
    shard names each image the same way."""
    count: dict[str, int] = {}
    for im in images:
        count[im.rel] = count.get(im.rel, 0) + 1
    taken: set[str] = {im.rel for im in images if count[im.rel] == 1}
    out = []
    for im in images:
        rel = im.rel
        if count[rel] > 1:
            suffix = Path(im.path).suffix.lstrip(".").lower()
            cand = f"{rel}-{suffix}" if suffix else rel
            i = 2
            base = cand
            while cand in taken:
                cand = f"{base}-{i}"
                i += 1
            rel = cand
            taken.add(rel)
        out.append(InputImage(im.path, rel))
    return out


def parse_shard(text: str) -> tuple[int, int]:
    """``"K/N"`` -> ``(K, N)`` with ``1 <= K <= N``.

    Raises:
        ValueError: naming what is wrong.
    """
    k, sep, n = str(text).partition("/")
    try:
        if not sep:
            raise ValueError
        ki, ni = int(k), int(n)
    except ValueError:
        raise ValueError(f"--shard {text}: expected K/N, e.g. 2/8 (the second of eight shards)") from None
    if ni < 1 or not 1 <= ki <= ni:
        raise ValueError(f"--shard {text}: K must be between 1 and N (N >= 1)")
    return ki, ni


def shard_of(image: InputImage, n: int) -> int:
    """The shard (1..n) an image belongs to: a hash (CRC-32) of its output name, so the same on every machine, for
    every order of the inputs and wherever the data set is mounted."""
    return zlib.crc32(image.rel.encode("utf-8")) % n + 1


def take_shard(images: Sequence[InputImage], k: int, n: int) -> list[InputImage]:
    """The images of shard ``k`` of ``n`` (all of them when ``n == 1``), in their order."""
    return list(images) if n == 1 else [im for im in images if shard_of(im, n) == k]


@dataclass
class Loaded:
    """An image read and preprocessed by :func:`stream_batches` (``prepared``), or why it could not be
    (``error``); ``load_s``: seconds spent reading and preprocessing it."""

    item: InputImage
    prepared: Any = None  # vitviz.pipeline.PreparedImage
    error: BaseException | None = None
    load_s: float = 0.0


def _load_one(pipeline: Any, item: InputImage, check: SizeCheck | None = None) -> Loaded:
    t = time.perf_counter()
    try:
        loaded = load_image(item.path, check=check)
        try:
            prepared = pipeline.prepare(loaded)
        except ImageError as e:
            raise ImageError(item.path, e.problem) from None
    except Exception as e:  # noqa: BLE001 - this image is reported and skipped; the others go on
        return Loaded(item, error=e, load_s=time.perf_counter() - t)
    return Loaded(item, prepared=prepared, load_s=time.perf_counter() - t)


def default_workers(device: str = "cpu") -> int:
    """Loader threads by default: on a GPU enough to keep it fed (up to 8, one per core), on the CPU two (the model
    takes the cores; a second thread hides a slow image behind the one being computed)."""
    cores = os.cpu_count() or 1
    return max(1, min(8 if str(device).startswith("cuda") else 2, cores))


def stream_batches(pipeline: Any, items: Sequence[InputImage], batch_size: int, *,
                   workers: int | None = None, check: SizeCheck | None = None) -> Iterator[list[Loaded]]:
    """Batches of up to ``batch_size`` :class:`Loaded` images, in the order of ``items``, read and preprocessed
    (``pipeline.prepare``) by ``workers`` threads (default :func:`default_workers` of the pipeline's device) that stay
    at most two batches ahead; ``check``: a limit on each image's size, asked from its header before it is decoded
    (:func:`vitviz.imaging.load_image`; a refused image is yielded with its error). Closing the generator (a
    ``break``, an exception, Ctrl+C in the consumer) cancels what was not started; the images being read finish in the
    background."""
    if batch_size < 1:
        raise ValueError(f"batch size must be at least 1, got {batch_size}")
    workers = default_workers(getattr(pipeline, "device", "cpu")) if workers is None else int(workers)
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    ahead = 2 * batch_size  # images read or being read, not yet handed out
    pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="vitviz-loader")
    pending: deque[Future] = deque()
    todo = iter(items)

    def fill() -> None:
        while len(pending) < ahead:
            item = next(todo, None)
            if item is None:
                return
            pending.append(pool.submit(_load_one, pipeline, item, check))

    try:
        fill()
        batch: list[Loaded] = []
        while pending:
            batch.append(pending.popleft().result())
            fill()
            if len(batch) == batch_size:
                yield batch
                batch = []
        if batch:
            yield batch
    finally:
        for f in pending:
            f.cancel()
        pool.shutdown(wait=False, cancel_futures=True)


def progress_bar(total: int, desc: str, *, quiet: bool = False, unit: str = "image"):
    """A tqdm bar on stderr with the rate (images/s) and the time left; off with ``quiet`` (then only log lines)."""
    return tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, disable=quiet, dynamic_ncols=True,
                smoothing=0.1, mininterval=0.5)
