"""The named pretrained weights as plain data, importable without torch (``vitviz models``, menus, start-up).

:mod:`vitviz.model.sources.torch_hub` builds its registry from :data:`TORCHVISION_VITS`; a test checks every row
against torchvision's own weight metadata (URL, size, parameters, accuracy, preprocessing), so the table cannot drift
from the source. :data:`HUB_MODELS` is the curated list of Hugging Face Hub models (:mod:`vitviz.model.sources.hub`
downloads them); a test checks each size against the tensors of timm's architecture. The caches are looked up without
importing torch or huggingface_hub.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from vitviz.resources import DEMO_CLASSES, resources_dir

# name -> torchvision architecture, weight enum member, URL, download MB, parameters, top-1 %, resize, crop,
# interpolation. vit_h_14 has no IMAGENET1K_V1: its 224 px SWAG linear-probe weights keep the input size (and CPU
# cost) comparable to the others; the 518 px end-to-end weights are "vit_h_14_518". Mean/std: ImageNet's.
_BASE = "https://download.pytorch.org/models/"
TORCHVISION_VITS: dict[str, tuple[str, str, str, float, int, float, int, int, str]] = {
    "vit_b_16": ("vit_b_16", "IMAGENET1K_V1", _BASE + "vit_b_16-c867db91.pth", 330.285, 86567656, 81.072,
                 256, 224, "bilinear"),
    "vit_b_32": ("vit_b_32", "IMAGENET1K_V1", _BASE + "vit_b_32-d86f8d99.pth", 336.604, 88224232, 75.912,
                 256, 224, "bilinear"),
    "vit_l_16": ("vit_l_16", "IMAGENET1K_V1", _BASE + "vit_l_16-852ce7e3.pth", 1161.023, 304326632, 79.662,
                 242, 224, "bilinear"),
    "vit_l_32": ("vit_l_32", "IMAGENET1K_V1", _BASE + "vit_l_32-c7638314.pth", 1169.449, 306535400, 76.972,
                 256, 224, "bilinear"),
    "vit_h_14": ("vit_h_14", "IMAGENET1K_SWAG_LINEAR_V1", _BASE + "vit_h_14_lc_swag-c1eb923e.pth", 2411.209,
                 632045800, 85.708, 224, 224, "bicubic"),
    "vit_h_14_518": ("vit_h_14", "IMAGENET1K_SWAG_E2E_V1", _BASE + "vit_h_14_swag-80465313.pth", 2416.643,
                     633470440, 88.552, 518, 518, "bicubic"),
}


def description(name: str) -> str:
    arch, member, _, _, params, acc, _, crop, _ = TORCHVISION_VITS[name]
    return (f"torchvision {arch} {member}: ImageNet-1k top-1 {acc:.1f}%, {crop} px, "
            f"{params / 1e6:.0f} M parameters")


def hub_dir() -> Path:
    """``torch.hub.get_dir()``; without importing torch when it is not loaded yet (then ``set_dir`` cannot have
    been called): ``$TORCH_HOME/hub``, by default ``${XDG_CACHE_HOME:-~/.cache}/torch/hub``."""
    hub = sys.modules.get("torch.hub")  # (torch itself may be half-imported on the worker thread right now)
    get_dir = getattr(hub, "get_dir", None)
    if get_dir is not None:
        try:
            return Path(get_dir())
        except Exception:  # noqa: BLE001 - a module still initialising: the default below is what it would say
            pass
    torch_home = os.getenv("TORCH_HOME") or os.path.join(os.getenv("XDG_CACHE_HOME", "~/.cache"), "torch")
    return Path(os.path.expanduser(torch_home)) / "hub"


def cache_file(name: str) -> Path:
    """Where the weights of ``name`` are (or would be) cached: ``<hub dir>/checkpoints/<file>``."""
    return hub_dir() / "checkpoints" / TORCHVISION_VITS[name][2].rsplit("/", 1)[-1]


# ---------------------------------------------------------------------------------------------------------------------
# curated models from the Hugging Face Hub (vitviz.model.sources.hub downloads them)
# ---------------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class HubModel:
    """One curated model of the Model menu, ``vitviz models`` and the first-run offer.

    Attributes:
        key: short name accepted by ``--model`` (``"dino-s8"``).
        repo: Hugging Face Hub repository (``"timm/vit_small_patch8_224.dino"``): timm's own uploads, each a
            ``config.json`` (``architecture`` + ``pretrained_cfg``) and a ``model.safetensors`` in timm's layout.
        title: menu text (``"DINO ViT-S/8"``).
        what: what the model is for, one line (classifier or features, and on what it was trained).
        group: menu section: ``"imagenet"`` (classifiers), ``"dino"`` (self-supervised features), ``"language"``
            (image towers of image-text models).
        size_mb: download size in MB (1e6 bytes): the float32 tensors of the weights file, computed from timm's
            architecture and checked by a test; the file adds a few kB of header.
        offer: offered when a photo is opened with the bundled shapes model (first run).
        text: where its text tower is (:mod:`vitviz.model.text`, fetched only when a prompt asks for it):
            ``"open_clip"`` (open_clip's files in the same repository, beside timm's image tower),
            ``"hf"`` (the same Transformers weights file, plus the tokenizer files), ``""``: none.
        text_mb: what the text tower adds to the download in MB: open_clip's whole-model file, or the tokenizer
            files of a Transformers repository (their weights file holds both towers).
        text_note: why there is no text tower, and where one is (``"text"`` empty only).
        text_repo: the repository that holds the text tower when ``repo`` (timm's image-only upload) does not: the
            same checkpoint's open_clip release, both towers in one file (``"timm/ViT-B-16-SigLIP2"``); ``""``:
            ``repo``.
    """

    key: str
    repo: str
    title: str
    what: str
    group: str
    size_mb: float
    offer: bool = False
    text: str = ""
    text_mb: float = 0.0
    text_note: str = ""
    text_repo: str = ""

    @property
    def ref(self) -> str:
        """The model reference of :mod:`vitviz.model.sources.refs` (``"hub:<repo>"``)."""
        return f"hub:{self.repo}"

    def label(self) -> str:
        """``"DINO ViT-S/8 · 87 MB"``: menu and button text."""
        return f"{self.title} · {self.size_mb:.0f} MB"

    def text_tower(self) -> str:
        """What ``vitviz models`` says of its text tower: ``"yes, +599 MB when asked"``, ``"yes, +1.4 MB
        tokenizer"``, or ``"no"``."""
        if self.text == "open_clip":
            return f"yes, +{self.text_mb:.0f} MB when asked"
        if self.text == "hf":
            return f"yes, +{self.text_mb:.1f} MB tokenizer"
        return "no"


HUB_MODELS: tuple[HubModel, ...] = (
    HubModel("deit-s", "timm/deit_small_patch16_224.fb_in1k", "DeiT-S/16",
             "ImageNet-1k classifier (Touvron et al. 2021), 224 px", "imagenet", 88.2, offer=True),
    HubModel("vit-s16-augreg", "timm/vit_small_patch16_224.augreg_in21k_ft_in1k", "ViT-S/16 augreg",
             "ImageNet-1k classifier, ImageNet-21k pre-trained (Steiner et al. 2021), 224 px", "imagenet", 88.2),
    HubModel("vit-b16-augreg", "timm/vit_base_patch16_224.augreg_in21k_ft_in1k", "ViT-B/16 augreg",
             "ImageNet-1k classifier, ImageNet-21k pre-trained (Steiner et al. 2021), 224 px", "imagenet", 346.3,
             offer=True),
    HubModel("dino-s8", "timm/vit_small_patch8_224.dino", "DINO ViT-S/8",
             "self-supervised features, no classifier (Caron et al. 2021): the famous [CLS] maps", "dino", 86.7,
             offer=True),
    HubModel("dino-b16", "timm/vit_base_patch16_224.dino", "DINO ViT-B/16",
             "self-supervised features, no classifier (Caron et al. 2021)", "dino", 343.2, offer=True),
    HubModel("dinov2-s", "timm/vit_small_patch14_dinov2.lvd142m", "DINOv2 ViT-S/14",
             "self-supervised features, no classifier (Oquab et al. 2023), 518 px", "dino", 88.2),
    HubModel("dinov2-s-reg", "timm/vit_small_patch14_reg4_dinov2.lvd142m", "DINOv2 ViT-S/14 with registers",
             "DINOv2 with 4 register tokens (Darcet et al. 2023), no classifier, 518 px", "dino", 88.2),
    HubModel("dinov2-b", "timm/vit_base_patch14_dinov2.lvd142m", "DINOv2 ViT-B/14",
             "self-supervised features, no classifier (Oquab et al. 2023), 518 px", "dino", 346.3),
    HubModel("dinov2-b-reg", "timm/vit_base_patch14_reg4_dinov2.lvd142m", "DINOv2 ViT-B/14 with registers",
             "DINOv2 with 4 register tokens (Darcet et al. 2023), no classifier, 518 px", "dino", 346.3),
    HubModel("dinov3-s", "timm/vit_small_patch16_dinov3.lvd1689m", "DINOv3 ViT-S/16",
             "self-supervised features, no classifier (Simeoni et al. 2025): RoPE, 4 registers, 256 px; gated on "
             "the Hub (accept its licence, then 'hf auth login' or HF_TOKEN)", "dino", 86.3),
    HubModel("dinov3-b", "timm/vit_base_patch16_dinov3.lvd1689m", "DINOv3 ViT-B/16",
             "self-supervised features, no classifier (Simeoni et al. 2025): RoPE, 4 registers, 256 px; gated",
             "dino", 342.6),
    HubModel("dinov3-l", "timm/vit_large_patch16_dinov3.lvd1689m", "DINOv3 ViT-L/16",
             "self-supervised features, no classifier (Simeoni et al. 2025): RoPE, 4 registers, 256 px; gated",
             "dino", 1212.3),
    HubModel("eva02-b14", "timm/eva02_base_patch14_224.mim_in22k", "EVA-02 ViT-B/14",
             "masked-image-modelling features, no classifier (Fang et al. 2023): RoPE, SwiGLU, 224 px", "dino",
             343.0),
    HubModel("clip-b16", "timm/vit_base_patch16_clip_224.openai", "CLIP ViT-B/16 (OpenAI)",
             "OpenAI's CLIP (Radford et al. 2021), 224 px; its text tower is open_clip's file beside it",
             "language", 344.8, text="open_clip", text_mb=598.5),
    HubModel("siglip-b16", "timm/vit_base_patch16_siglip_224.webli", "SigLIP ViT-B/16",
             "image tower of SigLIP (Zhai et al. 2023), attention-pool head, 224 px", "language", 371.5,
             text_note="timm's upload holds the image tower only; 'siglip-b16-hf' has both towers"),
    HubModel("clip-b16-hf", "openai/clip-vit-base-patch16", "CLIP ViT-B/16 (OpenAI, Transformers)",
             "OpenAI's CLIP as a Transformers CLIPModel: both towers in one file, 224 px", "language", 598.5,
             text="hf", text_mb=1.4),
    HubModel("siglip-b16-hf", "google/siglip-base-patch16-224", "SigLIP ViT-B/16 (Google, Transformers)",
             "SigLIP (Zhai et al. 2023) as a Transformers SiglipModel: both towers in one file, 224 px", "language",
             812.6, text="hf", text_mb=0.8),
    HubModel("siglip2-b16", "timm/vit_base_patch16_siglip_224.v2_webli", "SigLIP 2 ViT-B/16",
             "image tower of SigLIP 2 (Tschannen et al. 2025), attention-pool head, 224 px; its text tower (Gemma's "
             "tokenizer) is the same checkpoint's open_clip release", "language", 371.5, text="open_clip",
             text_mb=1500.8, text_repo="timm/ViT-B-16-SigLIP2"),
    HubModel("siglip2-b16-naflex", "google/siglip2-base-patch16-naflex", "SigLIP 2 ViT-B/16 NaFlex",
             "SigLIP 2 NaFlex (Transformers Siglip2Model): each image at its own aspect ratio, up to 256 patches; "
             "the image tower of the file is used", "language", 1500.9, text="hf", text_mb=34.4),
    HubModel("aimv2-l14", "timm/aimv2_large_patch14_224.apple_pt", "AIMv2 ViT-L/14",
             "AIMv2 features (Fini et al. 2024): autoregressive pre-training, RMSNorm, no [CLS], mean pooling, 224 px",
             "dino", 1236.8),
    HubModel("pe-core-b16", "timm/vit_pe_core_base_patch16_224.fb", "Perception Encoder core ViT-B/16",
             "image tower of PE core (Bolya et al. 2025): RoPE and a position table, attention-pool head and "
             "projection, 224 px; its text tower is the same checkpoint's open_clip release", "language", 374.7,
             text="open_clip", text_mb=1790.6, text_repo="timm/PE-Core-B-16"),
)
HUB_BY_KEY: dict[str, HubModel] = {m.key: m for m in HUB_MODELS}
HUB_BY_REPO: dict[str, HubModel] = {m.repo: m for m in HUB_MODELS}
HUB_GROUPS: dict[str, str] = {"imagenet": "ImageNet classifiers",
                              "dino": "Self-supervised (DINO, DINOv2, DINOv3, EVA-02)",
                              "language": "Image-text models (CLIP, SigLIP, Perception Encoder)"}

def hub_title(repo: str) -> str:
    """The curated title of Hub repository ``repo`` (``"DINO ViT-S/8"``), else the repository id."""
    m = HUB_BY_REPO.get(repo)
    return m.title if m is not None else repo


# what a repository must hold: a config, then the first weights file present (safetensors before torch files,
# which are read with torch.load(weights_only=True) only)
HUB_CONFIG_FILES = ("config.json", "open_clip_config.json")
HUB_WEIGHT_FILES = {"config.json": ("model.safetensors", "pytorch_model.bin"),
                    "open_clip_config.json": ("open_clip_model.safetensors", "open_clip_pytorch_model.bin")}


def hf_cache_dir() -> Path:
    """The Hugging Face Hub cache, resolved as huggingface_hub does (without importing it): ``$HF_HUB_CACHE``, else
    ``$HUGGINGFACE_HUB_CACHE``, else ``$HF_HOME/hub``, else ``${XDG_CACHE_HOME:-~/.cache}/huggingface/hub``."""
    cache = os.getenv("HF_HUB_CACHE") or os.getenv("HUGGINGFACE_HUB_CACHE")
    if not cache:
        home = os.getenv("HF_HOME") or os.path.join(os.getenv("XDG_CACHE_HOME") or os.path.join("~", ".cache"),
                                                    "huggingface")
        cache = os.path.join(home, "hub")
    return Path(os.path.expandvars(os.path.expanduser(cache)))


def hf_offline() -> bool:
    """``HF_HUB_OFFLINE`` (or ``TRANSFORMERS_OFFLINE``) is set to a true value: use the cache only."""
    value = os.getenv("HF_HUB_OFFLINE") or os.getenv("TRANSFORMERS_OFFLINE") or ""
    return value.strip().upper() in ("1", "ON", "YES", "TRUE")


def hub_repo_folder(repo: str) -> Path:
    """``<cache>/models--<org>--<name>``: where the Hub's cache keeps ``repo`` (blobs, refs, snapshots)."""
    return hf_cache_dir() / ("models--" + repo.replace("/", "--"))


def hub_cached_files(repo: str, revision: str = "main") -> tuple[Path, Path] | None:
    """``(config, weights)`` of ``repo`` in the Hub's cache (the snapshot ``refs/<revision>`` points to), or None
    when either is missing: a cached model is used without any network request."""
    folder = hub_repo_folder(repo)
    try:
        commit = (folder / "refs" / revision).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    if not commit or "/" in commit or commit.startswith("."):
        return None
    snap = folder / "snapshots" / commit
    for config in HUB_CONFIG_FILES:
        if (snap / config).is_file():
            weights = next((snap / w for w in HUB_WEIGHT_FILES[config] if (snap / w).is_file()), None)
            return (snap / config, weights) if weights is not None else None
    return None


def hub_is_cached(repo: str) -> bool:
    """True when ``repo``'s config and weights are in the Hub's cache (no download needed)."""
    return hub_cached_files(repo) is not None


# ---------------------------------------------------------------------------------------------------------------------
# the first run: what is a photo
# ---------------------------------------------------------------------------------------------------------------------
def is_photo(source: str | os.PathLike[str]) -> bool:
    """Whether ``source`` is the user's own picture rather than one of the demo's shapes.

    Not a photo: a file in the bundled samples folder, or a file named as the demo writes its samples
    (``NN_<shape>.png``, :func:`vitviz.demo.samples.sample_name`). Everything else is (any other file, pasted or
    dropped pixels): the bundled shapes model knows nothing about it, and the window says so.
    """
    name = Path(os.fspath(source)).name
    if re.fullmatch(rf"\d\d_({'|'.join(DEMO_CLASSES)})\.png", name):
        return False
    try:
        samples = (resources_dir() / "samples").resolve()
        return Path(os.fspath(source)).resolve().parent != samples
    except (OSError, ValueError):
        return True


def ref_is_cached(ref: str) -> bool:
    """Whether a named model reference (``hub:...``, ``pretrained:...``) opens without a download."""
    if ref.startswith("hub:"):
        return hub_is_cached(ref[4:])
    if ref.startswith("pretrained:") and ref[11:] in TORCHVISION_VITS:
        return cache_file(ref[11:]).is_file()
    return False


def photo_offers() -> list[HubModel]:
    """The curated models offered when a photo is opened with the shapes model: ImageNet classifiers and DINO."""
    return [m for m in HUB_MODELS if m.offer]


def photo_default(remembered: str = "") -> str | None:
    """The model a photo opens with instead of the bundled shapes model, or None (no real model is cached yet).

    The remembered choice (the last named model the user opened) when it is cached; else the first cached model of
    the offer (:func:`photo_offers`), of the rest of the curated list, then of torchvision's weights. Only cached
    models: opening a photo never starts a download by itself.
    """
    candidates = [remembered] if remembered else []
    candidates += [m.ref for m in photo_offers()] + [m.ref for m in HUB_MODELS if not m.offer]
    candidates += [f"pretrained:{n}" for n in TORCHVISION_VITS]
    return next((r for r in candidates if ref_is_cached(r)), None)
