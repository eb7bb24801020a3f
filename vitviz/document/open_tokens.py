"""The patch tokens of the open images, for fits over all of them (feature PCA's "Fit over all open images").

A fit over every open image needs each one's patch tokens at the layer shown. :class:`OpenImageTokens` keeps them
for one model at a time: every layer's patch tokens of each image (``[L+1, gh*gw, D]`` in the model's precision,
prefix tokens dropped), for at most :data:`MAX_IMAGES` images and :data:`MAX_BYTES`. The window reads the other
images on its worker (one forward pass each, without gradients) and adds them here; a session adds its own
result's. The fits made over them (:func:`vitviz.analysis.fit_feature_pca`) are kept per (layer, images, mask): a
joint fit is the same whichever of its images is shown, so stepping through the images fits once.

No Qt; torch only through the tensors handed in (imported when a fit is made).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

__all__ = ["FITS_KEPT", "MAX_BYTES", "MAX_IMAGES", "OpenImageTokens", "joint_words"]

MAX_IMAGES = 32
"""The most images a fit over all open images goes over (the shown one and the next ones in the image list)."""
MAX_BYTES = 256 << 20
"""The most bytes of tokens kept (every layer of every image fitted over: 7.8 MB per image for ViT-B/16 at 224)."""
FITS_KEPT = 16
"""Joint fits kept (layers x masks x image sets)."""


class OpenImageTokens:
    """Every layer's patch tokens of the open images, made by one model, and the fits over them.

    Attributes:
        maker: who made the tokens (the window's pipeline): another one forgets them all (:meth:`adopt`).
        failed: images that could not be read (left out of the fits, not asked for again).
    """

    def __init__(self, *, max_images: int = MAX_IMAGES, max_bytes: int = MAX_BYTES):
        self.max_images = int(max_images)
        self.max_bytes = int(max_bytes)
        self.maker: Any = None
        self.failed: set[str] = set()
        self._tokens: OrderedDict[str, tuple[Any, tuple[int, int]]] = OrderedDict()
        self._fits: OrderedDict[tuple, Any] = OrderedDict()

    # ------------------------------------------------------------------ holding tokens
    def adopt(self, maker: Any) -> None:
        """Tokens from now on come from ``maker`` (a model): those of another one are forgotten."""
        if maker is not self.maker:
            self.clear()
            self.maker = maker

    def clear(self) -> None:
        self._tokens.clear()
        self._fits.clear()
        self.failed.clear()

    def __len__(self) -> int:
        return len(self._tokens)

    def __contains__(self, source: object) -> bool:
        return source in self._tokens

    @property
    def nbytes(self) -> int:
        return sum(int(t.numel()) * int(t.element_size()) for t, _ in self._tokens.values())

    def add(self, source: str, tokens: Any, *, grid: tuple[int, int], num_prefix_tokens: int) -> None:
        """Hold ``tokens [L+1, N, D]`` (every layer, prefix first) of the image ``source``: its patch tokens, copied
        on the CPU in their own precision (a bf16 model's take half the bytes; the fits promote them). Tokens of another
        shape than those held (another model) replace them all."""
        source = str(source)
        p = int(num_prefix_tokens)
        patches = tokens[:, p:].detach().to("cpu").clone()
        if not patches.is_floating_point():
            patches = patches.float()
        if patches.shape[1] != int(grid[0]) * int(grid[1]):
            raise ValueError(f"{source}: {patches.shape[1]} patch tokens do not fill a {grid[0]}x{grid[1]} grid")
        held = next(iter(self._tokens.values()), None)
        if held is not None and (held[0].shape[0], held[0].shape[2]) != (patches.shape[0], patches.shape[2]):
            self.clear()  # another model's (its layers or width differ)
        self._tokens[source] = (patches, (int(grid[0]), int(grid[1])))
        self._tokens.move_to_end(source)
        self.failed.discard(source)
        while len(self._tokens) > self.max_images or (len(self._tokens) > 1 and self.nbytes > self.max_bytes):
            self._tokens.popitem(last=False)  # the oldest first (a fit asks again for what it lacks)

    def add_result(self, result: Any) -> None:
        """Hold the tokens of an :class:`~vitviz.pipeline.InferenceResult` (unless held already)."""
        if result.source not in self._tokens:
            self.add(result.source, result.tokens, grid=result.grid, num_prefix_tokens=result.num_prefix_tokens)

    # ------------------------------------------------------------------ which images
    def chosen(self, images: list[str], shown: Any) -> tuple[str, ...]:
        """The images a fit over all open ``images`` goes over: the first ones in order, as many as the limits allow
        (:data:`MAX_IMAGES`; :data:`MAX_BYTES` at the shown result's size), the shown result's image always among
        them, those that could not be read left out. The same set whichever of them is shown: one fit serves all."""
        per_image = max(1, int(shown.tokens[:, shown.num_prefix_tokens:].numel()) * int(shown.tokens.element_size()))
        most = max(1, min(self.max_images, self.max_bytes // per_image))
        src = str(shown.source)
        out: list[str] = []
        for s in map(str, images):
            if s not in out and s not in self.failed:
                out.append(s)
        if src not in out:
            out.append(src)
        if len(out) > most:
            out = out[:most] if src in out[:most] else out[:most - 1] + [src]
        return tuple(out)

    def missing(self, images: list[str], shown: Any) -> list[str]:
        """The images of :meth:`chosen` whose tokens are not held yet (the window reads them; the shown result's are
        added)."""
        self.add_result(shown)
        return [s for s in self.chosen(images, shown) if s not in self._tokens]

    def held(self, images: list[str], shown: Any) -> tuple[str, ...]:
        """The images of :meth:`chosen` whose tokens are held (the shown result's included: it is added)."""
        self.add_result(shown)
        return tuple(s for s in self.chosen(images, shown) if s in self._tokens)

    # ------------------------------------------------------------------ fits
    def fit(self, sources: tuple[str, ...], layer: int, *, mask_background: bool = False) -> Any:
        """The feature PCA fitted over the patch tokens of ``sources`` (held) after ``layer`` (-1: the patch
        embeddings): a :class:`vitviz.analysis.PCAFit`, made once per (sources, layer, mask)."""
        key = (tuple(sources), int(layer), bool(mask_background))
        if key in self._fits:
            self._fits.move_to_end(key)
            return self._fits[key]
        import torch

        from vitviz.analysis import fit_feature_pca

        parts = [self._tokens[s] for s in sources]
        stacked = torch.cat([t[int(layer) + 1] for t, _ in parts])
        fit = fit_feature_pca(stacked, grids=[g for _, g in parts], mask_background=bool(mask_background))
        self._fits[key] = fit
        while len(self._fits) > FITS_KEPT:
            self._fits.popitem(last=False)
        return fit

    def tokens_of(self, source: str, layer: int) -> Any:
        """The held patch tokens ``[gh*gw, D]`` of ``source`` after ``layer``."""
        return self._tokens[source][0][int(layer) + 1]


def joint_words(fitted: int, open_images: int, reading: bool) -> str:
    """The caption's note of a joint fit: "fitted over 3 open images", "fitted over 2 of 5 open images (reading the
    others…)"."""
    if open_images <= 1:
        return "fitted over the one open image"
    n = f"{fitted}" if fitted >= open_images else f"{fitted} of {open_images}"
    return f"fitted over {n} open images" + (" (reading the others…)" if reading else "")

