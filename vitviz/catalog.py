"""The named pretrained weights as plain data, importable without torch (``vitviz models``, menus, start-up).

:mod:`vitviz.model.pretrained` builds its registry from this table; a test checks every row against torchvision's
own weight metadata (URL, size, parameters, accuracy, preprocessing), so the table cannot drift from the source.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

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
