"""Models by name from the Hugging Face Hub (timm and Hugging Face repositories), downloaded once. No Qt.

Names (:func:`hub_repo`; :func:`vitviz.model.sources.refs.parse_model_ref` calls it, so the CLI and the window accept
the same ones):

================================================  ==============================================================
typed                                             repository
================================================  ==============================================================
``dino-s8`` (a key of the curated list)           ``timm/vit_small_patch8_224.dino`` (:data:`.catalog.HUB_MODELS`)
``timm/vit_small_patch14_reg4_dinov2.lvd142m``    itself (a timm model name with its pretrained tag)
``hf-hub:timm/...`` (timm's and open_clip's form)  the id after ``hf-hub:``
``facebook/dinov2-small``, ``openai/clip-...``    itself (a Hugging Face id)
================================================  ==============================================================

:func:`load_hub` then

1. uses the Hub's cache when the config and the weights are both there (no network request at all);
2. offline (``HF_HUB_OFFLINE=1``) or unreachable and not cached: :class:`PretrainedError` naming the model and the
   cache folder;
3. downloads ``config.json`` (``open_clip_config.json`` for open_clip repositories) and refuses an architecture
   vitviz does not open (:func:`check_supported`) before any weights are downloaded;
4. downloads the first weights file the repository has: ``model.safetensors``, else ``pytorch_model.bin`` (read with
   ``torch.load(weights_only=True)``); for open_clip ``open_clip_model.safetensors``, else
   ``open_clip_pytorch_model.bin``; Hugging Face repositories also ``preprocessor_config.json`` when present. Nothing
   else (no TensorFlow, Flax or ONNX files, no other pickles);
5. opens the snapshot folder with :func:`vitviz.model.load_checkpoint`.

Downloads go through ``huggingface_hub`` (its cache layout and locks, ``HF_HUB_CACHE`` / ``HF_HOME``,
``HF_ENDPOINT``, the user's token for gated models), over plain HTTP: a Xet transfer ignores an exception from its
progress callback, so it could not be cancelled; the Hub serves every file over HTTP too. The progress callback gets
``(done_bytes, total_bytes)`` per file; returning False cancels (:class:`DownloadCancelled`; no partial file is left).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

from vitviz.model.sources import catalog
from vitviz.model.sources.name_errors import CHECKPOINT_SUFFIXES, ModelNameError, close_name, name_error
from vitviz.model.sources.torch_hub import DownloadCancelled, PretrainedError, ProgressFn
from vitviz.model.timm_rope_archs import NAFLEX_ARCHS, ROPE_NAMES, family

PREFIXES = ("hf-hub:", "hf_hub:")
# a Hub repository id: "<owner>/<name>", each side 1-96 letters, digits, '-', '_', '.', starting with a letter or
# digit, not ending with '-' or '.', without '--' or '..' (repo_id_problem)
_ID_CHARS = re.compile(r"[A-Za-z0-9_.\-/]")

# what vitviz opens (the families of vitviz.model.vit): timm architecture name prefixes, Hugging Face model types
TIMM_PREFIXES = ("vit_", "deit_", "deit3_", "beit_", "beitv2_")
_TIMM_HYBRID = re.compile(r"_r(26|50)_|resnet|_rope|_mixer|_relpos|_srelpos|_xp_")  # vit_* with other token mixers
HF_MODEL_TYPES = ("vit", "dinov2", "dinov2_with_registers", "dinov3_vit", "beit", "data2vec-vision", "clip",
                  "clip_vision_model", "siglip", "siglip_vision_model", "aimv2", "aimv2_vision_model")
# hierarchical / windowed-attention families, named so that the refusal can say why
_WINDOWED = ("swin", "swinv2", "maxvit", "hiera", "mvit", "mvitv2", "nat", "dinat", "focalnet", "cswin", "twins",
             "efficientformer", "levit", "pvt", "pvt_v2", "segformer", "coat", "crossvit", "davit", "fastvit",
             "efficientvit", "nextvit", "tiny_vit", "edgenext")
SUPPORTED_TEXT = (
    "vitviz opens Vision Transformers with global attention: timm architectures vit_* (ViT, augreg, DINO, "
    "DINOv2 with or without registers, DINOv3, Perception Encoder, RoPE ViTs, CLIP and SigLIP image towers), "
    "eva02_*, deit_*, deit3_*, beit_*, beitv2_*; Hugging "
    f"Face model types {', '.join(HF_MODEL_TYPES)}; open_clip ViT image towers. Curated: 'vitviz models'.")


@dataclass(frozen=True)
class HubFiles:
    """A model's files in the Hub's cache: its config and its weights (both in one snapshot folder)."""

    repo: str
    config: Path
    weights: Path

    @property
    def source(self) -> Path:
        """What :func:`~vitviz.model.load_checkpoint` opens: the folder (timm / Hugging Face), or the weights file
        (open_clip, whose config is not one the folder reader knows)."""
        return self.config.parent if self.config.name == "config.json" else self.weights


def repo_id_problem(text: str) -> str | None:
    """Why ``text`` cannot be a Hub repository id ``OWNER/NAME``, in a few words, or None when it can be one."""
    if not text:
        return "nothing after the prefix"
    bad = next((c for c in text if not _ID_CHARS.fullmatch(c)), None)
    if bad is not None:
        return "it has a space" if bad.isspace() else f"it has {bad!r}"
    for pair in ("..", "--"):
        if pair in text:
            return f"it has {pair!r}"
    if text.count("/") != 1:
        return "it has no '/'" if "/" not in text else f"it has {text.count('/')} '/'"
    for part, where, side in zip(text.split("/"), ("before", "after"), ("owner", "name")):
        if not part:
            return f"nothing {where} its '/'"
        if len(part) > 96:
            return f"its {side} is longer than 96 characters"
        if not part[0].isalnum():
            return f"its {side} starts with {part[0]!r}"
        if part[-1] in ".-":
            return f"its {side} ends with {part[-1]!r}"
    if text.lower().endswith(CHECKPOINT_SUFFIXES):
        return f"it ends in {Path(text).suffix}, like a file"
    return None


def not_an_id(typed: str, problem: str, form: str = "OWNER/NAME", suggestion: str | None = None) -> ModelNameError:
    """The error for ``typed``, written as a Hub id (``form``) that cannot be one because of ``problem``."""
    return name_error(typed, f"not a Hugging Face Hub id ({problem}; expected {form})", suggestion)


def hub_repo(text: str) -> str | None:
    """The Hub repository ``text`` names (see the module docstring), or None when it is not written as a Hub id
    (an ``OWNER/NAME`` that cannot be one is left to :func:`~vitviz.model.sources.refs.parse_model_ref`, which also
    says that no such file exists).

    Pure string handling: it does not look at the file system (an existing path wins, in
    :func:`~vitviz.model.sources.refs.parse_model_ref`) nor at the network.

    Raises:
        ModelNameError: ``hf-hub:ID`` whose ID cannot be a repository id (the message says why).
    """
    typed, text = text, text.strip()
    if text in catalog.HUB_BY_KEY:
        return catalog.HUB_BY_KEY[text].repo
    for p in PREFIXES:
        if text.startswith(p):
            problem = repo_id_problem(text[len(p):])
            if problem is not None:
                raise not_an_id(typed, problem.replace("the prefix", repr(p)), f"{p}OWNER/NAME",
                                close_name(text[len(p):], catalog.HUB_BY_REPO) if text[len(p):] else None)
            return text[len(p):]
    return text if repo_id_problem(text) is None else None


display_name = catalog.hub_title


def _named(repo: str) -> str:
    """``"DINO ViT-S/8 (timm/vit_small_patch8_224.dino)"``, or the id alone when it has no curated title."""
    title = display_name(repo)
    return repo if title == repo else f"{title} ({repo})"


def is_cached(repo: str) -> bool:
    """True when the config and the weights of ``repo`` are in the Hub's cache."""
    return catalog.hub_is_cached(repo)


# ---------------------------------------------------------------------------------------------------------------------
# what vitviz opens
# ---------------------------------------------------------------------------------------------------------------------
def check_supported(repo: str, config_path: Path) -> None:
    """Refuse, before any weights are downloaded, a repository whose config names an architecture vitviz does not
    open (the message says what it is and what is supported).

    Raises:
        PretrainedError: unreadable config, or an unsupported architecture.
    """
    what = _unsupported(_read_config(repo, config_path), Path(config_path).name)
    if what is not None:
        raise PretrainedError(f"{repo}: {what}; not supported. {SUPPORTED_TEXT}")


def _read_config(repo: str, path: Path) -> dict[str, Any]:
    """A config file's JSON object (:class:`PretrainedError` naming the model and the file when it is not one)."""
    try:
        config = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise PretrainedError(f"{repo}: cannot read its {Path(path).name} ({e}); file: {path}") from None
    if not isinstance(config, dict):
        raise PretrainedError(f"{repo}: {Path(path).name} is not a JSON object of settings ({path})")
    return config


def _unsupported(config: dict[str, Any], file_name: str) -> str | None:
    """What the config describes when vitviz cannot open it, else None."""
    if file_name == "open_clip_config.json":
        vision = (config.get("model_cfg") or {}).get("vision_cfg") or {}
        timm_name = vision.get("timm_model_name")
        if isinstance(timm_name, str) and timm_name:
            return None if _timm_supported(timm_name) else f"an open_clip model with a timm {timm_name!r} image tower"
        if isinstance(vision.get("layers"), (list, tuple)):
            return "an open_clip model with a ResNet image tower"
        return None if "patch_size" in vision else "an open_clip model without a ViT image tower"
    arch = config.get("architecture")
    if isinstance(arch, str) and arch:  # timm's config.json
        if _timm_supported(arch):
            return None
        family = re.split(r"[_\d]", arch, maxsplit=1)[0]
        windowed = " (windowed / hierarchical attention)" if family in _WINDOWED else ""
        return f"a timm {arch!r} model{windowed}"
    model_type = config.get("model_type")
    if isinstance(model_type, str) and model_type:  # a Hugging Face Transformers config
        if model_type in HF_MODEL_TYPES:
            return None
        archs = config.get("architectures")
        named = f" ({', '.join(map(str, archs))})" if isinstance(archs, list) and archs else ""
        windowed = " with windowed / hierarchical attention" if model_type.replace("-", "_") in _WINDOWED else ""
        return f"a Hugging Face {model_type!r} model{named}{windowed}"
    return (f"its {file_name} names neither a timm architecture ('architecture') nor a Hugging Face model type "
            "('model_type')")


def _timm_supported(arch: str) -> bool:
    """A plain timm ViT, or a RoPE model of timm's Eva class vitviz reads (EVA-02, PE, DINOv3, RoPE ViTs)."""
    if family(arch) is not None or arch in NAFLEX_ARCHS:
        return True
    return arch.startswith(TIMM_PREFIXES) and not _TIMM_HYBRID.search(arch) and not ROPE_NAMES.search(arch)


# ---------------------------------------------------------------------------------------------------------------------
# downloads
# ---------------------------------------------------------------------------------------------------------------------
def _offline_message(repo: str, reason: str) -> str:
    folder = catalog.hub_repo_folder(repo)
    return (f"{_named(repo)} is not downloaded yet, and {reason}.\n"
            f"  model: https://huggingface.co/{repo}\n"
            f"  cache: {folder}\n"
            f"Connect once (the model is then cached for good and opens offline), or copy that folder from a machine "
            f"that has it into {catalog.hf_cache_dir()}; or open a local checkpoint: 'vitviz --model path/to/file', "
            f"or \"Open checkpoint…\" in the app.")


def _bar_class(progress: ProgressFn | None, show_bar: bool, repo: str, filename: str) -> type:
    """A tqdm class for ``hf_hub_download(tqdm_class=...)``: draws the terminal bar when ``show_bar``, reports
    ``progress(done, total)`` after every chunk, and raises :class:`DownloadCancelled` when it returns False."""
    from tqdm.auto import tqdm

    class _Bar(tqdm):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any):
            kwargs.pop("name", None)  # huggingface_hub's own bars take a name; tqdm does not
            kwargs["disable"] = not show_bar
            kwargs.setdefault("file", sys.stderr)
            kwargs["desc"] = f"{repo}: {filename}"  # (huggingface_hub's would be the end of the URL)
            super().__init__(*args, **kwargs)
            self.vitviz_done = int(kwargs.get("initial") or 0)

        def update(self, n: float | None = 1) -> bool | None:
            shown = super().update(n)
            self.vitviz_done += int(n or 0)
            if progress is not None and progress(self.vitviz_done, int(self.total or 0)) is False:
                raise DownloadCancelled(f"download of {_named(repo)} cancelled; nothing was cached")
            return shown

    return _Bar


@contextlib.contextmanager
def _plain_http() -> Iterator[None]:
    """Downloads over HTTP for the duration (see the module docstring: a Xet transfer cannot be cancelled)."""
    from huggingface_hub import constants

    before = constants.HF_HUB_DISABLE_XET
    constants.HF_HUB_DISABLE_XET = True
    try:
        yield
    finally:
        constants.HF_HUB_DISABLE_XET = before


@contextlib.contextmanager
def _no_partial_files(repo: str) -> Iterator[None]:
    """On any failure (cancel included), delete the ``*.incomplete`` files this download left in the cache (recent
    huggingface_hub versions delete their own; older ones kept them to resume)."""
    blobs = catalog.hub_repo_folder(repo) / "blobs"
    before = set(blobs.glob("*.incomplete")) if blobs.is_dir() else set()
    try:
        yield
    except BaseException:
        for p in (set(blobs.glob("*.incomplete")) if blobs.is_dir() else set()) - before:
            with contextlib.suppress(OSError):
                p.unlink()
        raise


def _endpoint() -> str | None:
    return os.getenv("HF_ENDPOINT") or None


def _hub_error(repo: str, filename: str, e: BaseException) -> PretrainedError:
    """A Hub error as one message naming the model (and, for network trouble, the cache folder)."""
    from huggingface_hub import errors as hf

    if isinstance(e, hf.OfflineModeIsEnabled):
        return PretrainedError(_offline_message(repo, "offline mode is on (HF_HUB_OFFLINE=1)"))
    if isinstance(e, hf.LocalEntryNotFoundError):  # no network and not cached
        return PretrainedError(_offline_message(repo, f"the Hub cannot be reached ({_first_line(e)})"))
    if isinstance(e, hf.GatedRepoError):
        return PretrainedError(f"{repo}: a gated model; accept its conditions on https://huggingface.co/{repo} and "
                               "log in ('hf auth login' or HF_TOKEN) to download it")
    if isinstance(e, hf.RepositoryNotFoundError):
        close = close_name(repo, catalog.HUB_BY_REPO)
        return PretrainedError(f"{repo}: no such model on the Hugging Face Hub (or a private one: log in with 'hf "
                               "auth login' or set HF_TOKEN), nor a local file or folder of that name"
                               + (f"; did you mean {close}?" if close else ".") + " Curated names: 'vitviz models'")
    if isinstance(e, hf.RevisionNotFoundError):
        return PretrainedError(f"{repo}: the Hub has no 'main' revision of this repository")
    if isinstance(e, hf.HfHubHTTPError):
        status = getattr(getattr(e, "response", None), "status_code", None)
        return PretrainedError(f"{repo}: the Hub answered {status or 'an error'} for {filename} ({_first_line(e)})")
    if isinstance(e, OSError) and not isinstance(e, (ConnectionError, TimeoutError)):  # disk full, permissions
        return PretrainedError(f"{repo}: could not download {filename} into {catalog.hf_cache_dir()} "
                               f"({_first_line(e)})")
    if _is_network(e):  # the HTTP client's connection, timeout, proxy or TLS errors
        return PretrainedError(_offline_message(repo, f"the Hub cannot be reached ({type(e).__name__}: "
                                                      f"{_first_line(e)})"))
    raise e  # not the Hub's nor the network's: a bug, with its traceback


def _is_network(e: BaseException) -> bool:
    """A connection, timeout, proxy or TLS error (the HTTP client's classes differ between huggingface_hub versions:
    requests, httpx, httpx2)."""
    if isinstance(e, (ConnectionError, TimeoutError)):
        return True
    module = type(e).__module__.split(".", 1)[0]
    return module in ("httpx", "httpx2", "httpcore", "httpcore2", "requests", "urllib3", "ssl", "socket", "h11",
                      "h2", "anyio")


def _probe(repo: str) -> None:
    """One quick request (no retries) before downloading: huggingface_hub retries a failed first request with
    back-off for ~25 s when nothing is cached, and an offline user should hear at once why nothing happens."""
    from huggingface_hub import errors as hf
    from huggingface_hub import get_hf_file_metadata, hf_hub_url

    try:
        get_hf_file_metadata(hf_hub_url(repo, "config.json", endpoint=_endpoint()), timeout=10)
    except hf.EntryNotFoundError:  # the repository exists (an open_clip one has no config.json)
        return
    except Exception as e:  # noqa: BLE001 - every failure becomes one message naming the model
        raise _hub_error(repo, "config.json", e) from None


def _download(repo: str, filename: str, *, progress: ProgressFn | None, show_bar: bool) -> Path | None:
    """``filename`` of ``repo`` through the Hub's cache; None when the repository has no such file. Every other Hub
    error becomes a :class:`PretrainedError` naming the model."""
    from huggingface_hub import errors as hf
    from huggingface_hub import hf_hub_download

    import vitviz

    try:
        bar = _bar_class(progress, show_bar, repo, filename)
        return Path(hf_hub_download(repo, filename, cache_dir=catalog.hf_cache_dir(), tqdm_class=bar,
                                    endpoint=_endpoint(), library_name="vitviz", library_version=vitviz.__version__))
    except DownloadCancelled:
        raise
    except hf.EntryNotFoundError as e:
        if isinstance(e, hf.LocalEntryNotFoundError):  # (its subclass): no network and not cached
            raise _hub_error(repo, filename, e) from None
        return None
    except Exception as e:  # noqa: BLE001 - every failure becomes one message naming the model
        raise _hub_error(repo, filename, e) from None


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def fetch(repo: str, *, progress: ProgressFn | None = None, show_bar: bool = True) -> HubFiles:
    """The config and weights of ``repo`` in the Hub's cache, downloading what is missing (see the module docstring).

    Args:
        repo: a Hub repository id (:func:`hub_repo` of what the user typed).
        progress: ``progress(done_bytes, total_bytes)`` per file; returning False cancels.
        show_bar: a tqdm bar on stderr while downloading.

    Raises:
        DownloadCancelled: the callback returned False (no partial file left, nothing cached for this file).
        PretrainedError: offline or unreachable and not cached (names the model and the cache folder); no such
            repository; no config or weights file; an architecture vitviz does not open.
    """
    cached = catalog.hub_cached_files(repo)
    if cached is not None:
        check_supported(repo, cached[0])
        return HubFiles(repo, *cached)
    if catalog.hf_offline():
        raise PretrainedError(_offline_message(repo, "offline mode is on (HF_HUB_OFFLINE=1)"))
    def first(names: tuple[str, ...]) -> Path | None:  # the first of ``names`` the repository has
        return next((p for n in names if (p := _download(repo, n, progress=progress, show_bar=show_bar))), None)

    _probe(repo)
    with _plain_http(), _no_partial_files(repo):
        config = first(catalog.HUB_CONFIG_FILES)
        if config is None:
            raise PretrainedError(f"{repo}: the repository has no config.json, so it is not a timm or Hugging Face "
                                  "Transformers model (vitviz needs config.json and model.safetensors). "
                                  + SUPPORTED_TEXT)
        check_supported(repo, config)
        if config.name == "config.json" and "model_type" in _read_config(repo, config):  # Transformers: its
            first(("preprocessor_config.json",))  # preprocessing, when it has one
        candidates = catalog.HUB_WEIGHT_FILES[config.name]
        weights = first(candidates)
        if weights is None:
            raise PretrainedError(f"{repo}: the repository has none of {', '.join(candidates)} (vitviz reads "
                                  "safetensors, or PyTorch files with weights_only=True; sharded weights are not "
                                  "supported)")
    return HubFiles(repo, config, weights)


def download_first(repo: str, names: tuple[str, ...], *, progress: ProgressFn | None = None, show_bar: bool = True,
                   probe: bool = False) -> Path | None:
    """The first of ``names`` that ``repo`` has, in the Hub's cache: downloaded when missing, as :func:`fetch`
    downloads (plain HTTP, no partial file left when it fails or is cancelled); None when it has none of them.
    ``probe``: one quick request first, so that an unreachable Hub is said at once (:func:`fetch` does the same).

    Raises:
        DownloadCancelled, PretrainedError: as :func:`fetch`.
    """
    if probe:
        _probe(repo)
    with _plain_http(), _no_partial_files(repo):
        return next((p for n in names if (p := _download(repo, n, progress=progress, show_bar=show_bar))), None)


def load_hub(repo: str, *, progress: ProgressFn | None = None, show_bar: bool = True):
    """The model of Hub repository ``repo``, downloaded once (:func:`fetch`) and opened with
    :func:`~vitviz.model.load_checkpoint` (its own config says the architecture and preprocessing).

    Raises:
        DownloadCancelled, PretrainedError: see :func:`fetch`; also when the downloaded files cannot be opened (the
            message names the model, the cache folder and the problem).
    """
    from vitviz.model.checkpoints import CheckpointError, load_checkpoint

    files = fetch(repo, progress=progress, show_bar=show_bar)
    try:
        return load_checkpoint(files.source, name=display_name(repo))
    except CheckpointError as e:
        raise PretrainedError(f"{_named(repo)} is downloaded (in {catalog.hub_repo_folder(repo)}) but "
                              f"vitviz cannot open it: {e}") from None
