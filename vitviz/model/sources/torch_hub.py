"""Named pretrained weights: torchvision's ImageNet ViTs, downloaded once into torch's hub cache.

``pretrained("vit_b_16")`` downloads ``https://download.pytorch.org/models/vit_b_16-c867db91.pth`` (with a progress
bar) into ``torch.hub.get_dir()/checkpoints/`` unless it is already there, checks the hash prefix in the file name,
and loads it with :func:`vitviz.model.load_checkpoint`, taking the class labels and preprocessing from torchvision's
weight metadata. ``PRETRAINED`` describes the available names for menus. No Qt here.
"""

from __future__ import annotations

import hashlib
import os
import re
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from vitviz.model.preprocess import Preprocess

ProgressFn = Callable[[int, int], "bool | None"]
"""``progress(done_bytes, total_bytes)``; ``total_bytes`` is 0 when unknown. Returning False cancels the download."""


class PretrainedError(RuntimeError):
    """Named weights could not be provided (unknown name, offline and not cached, bad download)."""


class DownloadCancelled(PretrainedError):
    """The progress callback asked to stop; the partial file was deleted."""


@dataclass(frozen=True)
class PretrainedInfo:
    """One named set of weights.

    Attributes:
        name: the name passed to :func:`pretrained` (``"vit_b_16"``).
        weights: torchvision's weight enum member name (``"IMAGENET1K_V1"``).
        url: download address; the cached file is named after its last path component.
        size_mb: download size in MB (torchvision's ``_file_size`` meta).
        num_params: parameter count.
        img_size: input size the weights were trained at.
        description: one line for menus.
        preprocess: resize / crop / interpolation / mean / std of the weights' transforms.
        labels: class names, or None (see ``label_set``).
        label_set: a named list of class names loaded on use (``"imagenet-1k"``); :meth:`class_labels` gives them.
    """

    name: str
    weights: str
    url: str
    size_mb: float
    num_params: int
    img_size: int
    description: str
    preprocess: Preprocess
    labels: tuple[str, ...] | None = None
    label_set: str | None = None

    @property
    def file_name(self) -> str:
        return self.url.rsplit("/", 1)[-1]

    def class_labels(self) -> tuple[str, ...] | None:
        """``labels``, or the named label set (``"imagenet-1k"``: torchvision's list, loaded on first use)."""
        if self.labels is not None or self.label_set != "imagenet-1k":
            return self.labels
        from vitviz.model.checkpoints import imagenet_labels

        return imagenet_labels()


def _build_registry() -> dict[str, PretrainedInfo]:
    """From :data:`vitviz.model.sources.catalog.TORCHVISION_VITS` (no torchvision import at start-up; labels load
    on use)."""
    from vitviz.model.preprocess import IMAGENET_MEAN, IMAGENET_STD
    from vitviz.model.sources.catalog import TORCHVISION_VITS, description

    return {name: PretrainedInfo(
        name=name, weights=member, url=url, size_mb=mb, num_params=params, img_size=crop,
        description=description(name), label_set="imagenet-1k",
        preprocess=Preprocess(resize=resize, crop=(crop, crop), interpolation=interp,  # type: ignore[arg-type]
                              mean=IMAGENET_MEAN, std=IMAGENET_STD))
        for name, (arch, member, url, mb, params, _acc, resize, crop, interp) in TORCHVISION_VITS.items()}


PRETRAINED: dict[str, PretrainedInfo] = _build_registry()


def _info(name: str) -> PretrainedInfo:
    try:
        return PRETRAINED[name]
    except KeyError:
        raise PretrainedError(f"unknown pretrained name {name!r}; available: {', '.join(PRETRAINED)}") from None


def cache_path(name: str) -> Path:
    """Where the weights of ``name`` are (or would be) cached: ``torch.hub.get_dir()/checkpoints/<file>``."""
    from vitviz.model.sources.catalog import hub_dir

    return hub_dir() / "checkpoints" / _info(name).file_name


def is_cached(name: str) -> bool:
    """True when the weights of ``name`` are in the cache (no network needed)."""
    return cache_path(name).is_file()


def _urlopen(url: str, timeout: float = 30.0):
    """Open ``url`` for reading (monkeypatched in tests)."""
    req = urllib.request.Request(url, headers={"User-Agent": "vitviz"})
    return urllib.request.urlopen(req, timeout=timeout)


def _offline_message(info: PretrainedInfo, dest: Path, reason: str) -> str:
    return (
        f"cannot download the {info.name} weights ({reason}) and they are not cached.\n"
        f"  URL:   {info.url}\n"
        f"  cache: {dest}\n"
        f"Either download the file on a machine with network access and copy it to the cache path above, or open a "
        f"local checkpoint instead: 'vitviz --model path/to/file' on the command line, or \"Open checkpoint…\" in "
        f"the app (any torchvision, timm, Hugging Face, .npz or vitviz file)."
    )


def download(name: str, *, progress: ProgressFn | None = None, show_bar: bool = True) -> Path:
    """Download the weights of ``name`` into the cache (no-op when cached) and return the cached file.

    The download goes to ``<file>.<pid>.partial`` and is moved into place only when complete and, where the file name
    carries a hash prefix (torchvision's ``name-<sha256 prefix>.pth``), when the hash matches.

    Args:
        name: a key of :data:`PRETRAINED`.
        progress: ``progress(done_bytes, total_bytes)``, called after every chunk; returning False cancels
            (:class:`DownloadCancelled`, partial file deleted).
        show_bar: draw a tqdm progress bar on stderr.

    Raises:
        PretrainedError: offline / HTTP error (the message names the URL and the cache path), hash mismatch.
    """
    info = _info(name)
    dest = cache_path(name)
    if dest.is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(f"{dest.name}.{os.getpid()}.partial")  # per process: parallel downloads don't collide
    try:
        resp = _urlopen(info.url)
    except (urllib.error.URLError, OSError, TimeoutError) as e:
        reason = getattr(e, "reason", None) or e
        raise PretrainedError(_offline_message(info, dest, f"network error: {reason}")) from None
    bar = None
    sha = hashlib.sha256()
    try:
        total = int(resp.headers.get("Content-Length") or 0) if getattr(resp, "headers", None) is not None else 0
        if show_bar:
            from tqdm.auto import tqdm

            bar = tqdm(total=total or None, unit="B", unit_scale=True, unit_divisor=1024, desc=info.file_name)
        done = 0
        with open(partial, "wb") as f:
            while True:
                chunk = resp.read(1 << 20)
                if not chunk:
                    break
                f.write(chunk)
                sha.update(chunk)
                done += len(chunk)
                if bar is not None:
                    bar.update(len(chunk))
                if progress is not None and progress(done, total) is False:
                    raise DownloadCancelled(f"download of {info.name} cancelled; nothing was cached")
        if total and done != total:
            raise PretrainedError(_offline_message(info, dest, f"connection closed after {done} of {total} bytes"))
        m = re.search(r"-([a-f0-9]{6,64})\.", info.file_name)
        if m and not sha.hexdigest().startswith(m.group(1)):
            raise PretrainedError(f"downloaded {info.url} but its sha256 {sha.hexdigest()[:16]}… does not start with "
                                  f"{m.group(1)}; the file was discarded (corrupt download?)")
        os.replace(partial, dest)
    except (urllib.error.URLError, TimeoutError, ConnectionError) as e:
        raise PretrainedError(_offline_message(info, dest, f"network error during download: {e}")) from None
    except OSError as e:  # disk full, permissions ...
        raise PretrainedError(f"could not write the download of {info.name} to {dest.parent}: {e}") from None
    finally:
        if bar is not None:
            bar.close()
        close = getattr(resp, "close", None)
        if close is not None:
            close()
        if partial.exists():
            partial.unlink()
    return dest


def pretrained(name: str, *, progress: ProgressFn | None = None, show_bar: bool = True):
    """A ViT with torchvision's ImageNet weights ``name`` (see :data:`PRETRAINED`), downloading them if needed.

    Args:
        name: ``vit_b_16``, ``vit_b_32``, ``vit_l_16``, ``vit_l_32``, ``vit_h_14`` (224 px SWAG linear) or
            ``vit_h_14_518``.
        progress: optional ``progress(done_bytes, total_bytes) -> bool | None``; returning False cancels.
        show_bar: draw a tqdm progress bar while downloading.

    Returns:
        A :class:`~vitviz.model.vit.ViT` in eval mode whose ``spec`` has the weights' labels and preprocessing.

    Raises:
        PretrainedError: unknown name; offline and not cached (the message names the URL and the cache path and how
            to open a local file instead); the cached file is unreadable.
    """
    from vitviz.model.checkpoints import CheckpointError, load_checkpoint

    info = _info(name)
    path = download(name, progress=progress, show_bar=show_bar)
    try:
        model = load_checkpoint(path, preprocess=info.preprocess, labels=info.class_labels(),
                                name=f"{info.name} ({info.weights})")
    except CheckpointError as e:
        raise PretrainedError(f"the cached weights of {name} are unreadable: {e}. Delete {path} to download them "
                              "again.") from None
    return model
