"""Position information of the ViT: the fixed 2-D sin-cos embedding, resampling a learned embedding to another patch
grid (each reference implementation's way), and BEiT's relative position bias (its table, index and resizing).

This module never imports Qt.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

PosEmbedInterp = Literal["timm", "bicubic", "dino", "bilinear_aa", "sincos_grid"]
RelPosInterp = Literal["timm", "bilinear"]

POS_EMBED_INTERPS: tuple[str, ...] = ("timm", "bicubic", "dino", "bilinear_aa", "sincos_grid")
REL_POS_INTERPS: tuple[str, ...] = ("timm", "bilinear")


def sincos_pos_embed_2d(grid: tuple[int, int], dim: int, temperature: float = 10000.0) -> torch.Tensor:
    """Fixed 2-D sin-cos position embedding ``[gh*gw, dim]`` (MoCo v3 / MAE style; ``dim % 4 == 0``).

    The first half of the channels encodes the column (x), the second half the row (y).
    """
    if dim % 4 != 0:
        raise ValueError(f"embed_dim={dim} must be a multiple of 4 for pos_embed='sincos'")
    gh, gw = grid
    cpu = "cpu"  # computed on the CPU even inside a `with torch.device("meta")` (meta math imports torch._dynamo)
    y, x = torch.meshgrid(torch.arange(gh, dtype=torch.float64, device=cpu),
                          torch.arange(gw, dtype=torch.float64, device=cpu), indexing="ij")
    quarter = dim // 4
    omega = 1.0 / temperature ** (torch.arange(quarter, dtype=torch.float64, device=cpu) / quarter)
    ox = x.reshape(-1, 1) * omega[None]
    oy = y.reshape(-1, 1) * omega[None]
    pe = torch.cat([ox.sin(), ox.cos(), oy.sin(), oy.cos()], dim=1)
    return pe.float()


def resample_pos_embed(
    pos_embed: torch.Tensor, new_grid: tuple[int, int], old_grid: tuple[int, int], num_prefix_tokens: int,
    mode: PosEmbedInterp = "timm",
) -> torch.Tensor:
    """Resample ``pos_embed [1, p + gh*gw, D]`` bicubically over the patch grid; prefix slots are kept as they are.

    ``mode`` follows each reference implementation:

    * ``"timm"``: ``F.interpolate(size=new_grid, mode="bicubic", antialias=True)`` (timm's ``resample_abs_pos_embed``;
      also Hugging Face ``Dinov2WithRegisters`` and DINOv2's register models);
    * ``"bicubic"``: the same without antialiasing (Hugging Face ViT / DINO, ``Dinov2Model``, BEiT, CLIP, SigLIP
      ``interpolate_pos_encoding``);
    * ``"dino"``: DINO's and DINOv2's own code: ``scale_factor=((gh + 0.1) / old_gh, (gw + 0.1) / old_gw)``, no
      antialiasing (the 0.1 offset avoids floating-point error in the output size);
    * ``"bilinear_aa"``: ``F.interpolate(size=new_grid, mode="bilinear", antialias=True)`` (SigLIP 2 NaFlex:
      Hugging Face ``Siglip2VisionEmbeddings.resize_positional_embeddings``, which writes out the same weights);
    * ``"sincos_grid"``: not resampled but the fixed 2-D sin-cos embedding (:func:`sincos_pos_embed_2d`) of the new
      grid (AIMv2 native: Hugging Face ``Aimv2VisionEmbeddings`` builds it for each input's own grid).
    """
    if tuple(new_grid) == tuple(old_grid):
        return pos_embed
    prefix, patches = pos_embed[:, :num_prefix_tokens], pos_embed[:, num_prefix_tokens:]
    D = patches.shape[-1]
    dtype = patches.dtype
    grid = patches.reshape(1, old_grid[0], old_grid[1], D).permute(0, 3, 1, 2).float()
    if mode == "sincos_grid":
        patches = sincos_pos_embed_2d(tuple(new_grid), D).to(device=patches.device, dtype=dtype)[None]
        return torch.cat([prefix, patches], dim=1)
    if mode == "timm":
        grid = F.interpolate(grid, size=tuple(new_grid), mode="bicubic", antialias=True, align_corners=False)
    elif mode == "bicubic":
        grid = F.interpolate(grid, size=tuple(new_grid), mode="bicubic", align_corners=False)
    elif mode == "bilinear_aa":
        grid = F.interpolate(grid, size=tuple(new_grid), mode="bilinear", antialias=True, align_corners=False)
    elif mode == "dino":
        scale = ((new_grid[0] + 0.1) / old_grid[0], (new_grid[1] + 0.1) / old_grid[1])
        grid = F.interpolate(grid, scale_factor=scale, mode="bicubic", align_corners=False)
        if tuple(grid.shape[-2:]) != tuple(new_grid):  # pragma: no cover - the offset guarantees the size
            raise RuntimeError(f"DINO position-embedding interpolation gave {tuple(grid.shape[-2:])}, not {new_grid}")
    else:
        raise ValueError(f"pos_embed_interp={mode!r}; valid: {', '.join(POS_EMBED_INTERPS)}")
    patches = grid.permute(0, 2, 3, 1).reshape(1, new_grid[0] * new_grid[1], D).to(dtype)
    return torch.cat([prefix, patches], dim=1)



# relative position bias (BEiT)
def num_relative_distance(window: tuple[int, int]) -> int:
    """Rows of a BEiT relative-position table for a patch grid: ``(2gh-1)(2gw-1)`` offsets + 3 [CLS] entries."""
    return (2 * window[0] - 1) * (2 * window[1] - 1) + 3


def relative_position_index(window: tuple[int, int]) -> torch.Tensor:
    """BEiT's index ``[N, N]`` (``N = 1 + gh*gw``) into the relative-position table: patch pairs by their offset
    (row-major over ``(2gh-1) x (2gw-1)``), then [CLS]->patch, patch->[CLS], [CLS]->[CLS] (the last three rows)."""
    gh, gw = window
    ys, xs = torch.meshgrid(torch.arange(gh, device="cpu"), torch.arange(gw, device="cpu"), indexing="ij")
    coords = torch.stack([ys.flatten(), xs.flatten()])  # [2, M]
    rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0)  # [M, M, 2]
    idx_patch = (rel[..., 0] + gh - 1) * (2 * gw - 1) + (rel[..., 1] + gw - 1)
    n = num_relative_distance(window)
    index = torch.zeros((gh * gw + 1,) * 2, dtype=torch.long, device="cpu")
    index[1:, 1:] = idx_patch
    index[0, 0:] = n - 3
    index[0:, 0] = n - 2
    index[0, 0] = n - 1
    return index


def _geometric_positions(src: int, dst: int) -> list[float]:
    """The source offsets of BEiT's (and timm's) table resize: spaced by a geometric progression so that the
    outermost source offset reaches the new window's edge (unilm ``run_class_finetuning.py``)."""
    left, right = 1.01, 1.5
    while right - left > 1e-6:
        q = (left + right) / 2.0
        gp = (1.0 - q ** (src // 2)) / (1.0 - q)
        if gp > dst // 2:
            right = q
        else:
            left = q
    dis, cur = [], 1.0
    for i in range(src // 2):
        dis.append(cur)
        cur += q ** (i + 1)
    return [-d for d in reversed(dis)] + [0.0] + dis


def _interp_linear(points: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Left/right indices and distances of ``x`` among the sorted ``points`` (clamped at the ends; a point on a
    node gets equal weights), for linear interpolation on an uneven grid."""
    right = torch.bucketize(x.contiguous(), points).clamp(max=points.shape[0] - 1)
    left = (right - 1).clamp(0, points.shape[0] - 1)
    dl = (x - points[left]).clamp(min=0)
    dr = (points[right] - x).clamp(min=0)
    both = (dl == 0) & (dr == 0)
    dl, dr = torch.where(both, torch.ones_like(dl), dl), torch.where(both, torch.ones_like(dr), dr)
    return left, right, dl, dr


def resize_rel_pos_table(table: torch.Tensor, old_window: tuple[int, int], new_window: tuple[int, int],
                         mode: RelPosInterp = "timm") -> torch.Tensor:
    """Resize a BEiT relative-position table ``[(2gh-1)(2gw-1)+3, H]`` to another patch grid.

    ``"timm"``: timm's ``resize_rel_pos_bias_table`` (the offsets placed on BEiT's geometric progression, linear
    interpolation on that uneven grid); ``"bilinear"``: Hugging Face BEiT / data2vec-vision
    (``interpolate_pos_encoding``: the offset grid resized bilinearly). The three [CLS] rows are kept.
    """
    if tuple(new_window) == tuple(old_window):
        return table
    src = (2 * old_window[0] - 1, 2 * old_window[1] - 1)
    dst = (2 * new_window[0] - 1, 2 * new_window[1] - 1)
    H = table.shape[1]
    extra = table[-3:]
    grid = table[:-3].float()
    if mode == "bilinear":
        t = grid.reshape(1, src[1], src[0], H).permute(0, 3, 1, 2)  # HF reshapes (width, height): the same for squares
        t = F.interpolate(t, size=(dst[0], dst[1]), mode="bilinear")
        new = t.permute(0, 2, 3, 1).reshape(dst[0] * dst[1], H)
    elif mode == "timm":
        y = torch.tensor(_geometric_positions(src[0], dst[0]), dtype=torch.float32)
        x = torch.tensor(_geometric_positions(src[1], dst[1]), dtype=torch.float32)
        ty, tx = dst[0] // 2.0, dst[1] // 2.0
        dy, dx = torch.arange(-ty, ty + 0.1, 1.0), torch.arange(-tx, tx + 0.1, 1.0)
        yy, xx = torch.meshgrid(dy, dx, indexing="ij")
        yl, yr, ydl, ydr = _interp_linear(y, yy)
        xl, xr, xdl, xdr = _interp_linear(x, xx)
        z = grid.reshape(src[0], src[1], H)
        new = (z[yl, xl] * (ydr * xdr)[..., None] + z[yl, xr] * (ydr * xdl)[..., None]
               + z[yr, xl] * (ydl * xdr)[..., None] + z[yr, xr] * (ydl * xdl)[..., None])
        new = (new / ((ydl + ydr) * (xdl + xdr))[..., None]).reshape(dst[0] * dst[1], H)
    else:
        raise ValueError(f"rel_pos_interp={mode!r}; valid: {', '.join(REL_POS_INTERPS)}")
    return torch.cat([new.to(table.dtype), extra], dim=0)


def rel_pos_bias_for(table: torch.Tensor, window: tuple[int, int], grid: tuple[int, int],
                     mode: RelPosInterp) -> torch.Tensor:
    """The additive attention bias ``[1, H, N, N]`` of a relative-position ``table`` (trained for ``window``) at a
    patch ``grid`` (``N = 1 + gh*gw``)."""
    t = resize_rel_pos_table(table, window, grid, mode)
    index = relative_position_index(tuple(grid)).to(t.device)
    N = index.shape[0]
    return t[index.reshape(-1)].reshape(N, N, -1).permute(2, 0, 1).unsqueeze(0)


class RelativePositionBias(nn.Module):
    """A BEiT relative-position table shared by every block (``rel_pos_bias.relative_position_bias_table``)."""

    def __init__(self, window: tuple[int, int], num_heads: int, interp: RelPosInterp = "timm"):
        super().__init__()
        self.window = tuple(window)
        self.interp = interp
        self.relative_position_bias_table = nn.Parameter(torch.zeros(num_relative_distance(window), num_heads))

    def forward(self, grid: tuple[int, int]) -> torch.Tensor:
        """``[1, H, N, N]`` for the patch ``grid``."""
        return rel_pos_bias_for(self.relative_position_bias_table, self.window, grid, self.interp)
