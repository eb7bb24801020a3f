"""What one image through one model gives: :class:`InferenceResult` (everything the views need), the model-only
:class:`ModelData` it shares with every result of that model and grid, and :class:`PreparedImage` (an image ready for
the model). No Qt.
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import torch

from vitviz import analysis as A
from vitviz._util.arrays import to_numpy
from vitviz.capture import ImageCapture
from vitviz.capture.mechanistic import token_decoder
from vitviz.model.preprocess import CropGeometry
from vitviz.model.rope import RotaryEmbedding
from vitviz.model.vit import ViT


class ModelData:
    """What depends on the model (and the patch grid) only: computed once, shared by every image's result.

    Attributes:
        grid: the patch grid this data is for.
        pos_embed: ``[N_pos, D]`` float32 position embedding resampled to ``grid`` (prefix slots included when the
            model has them), or None.
        patch_embed_weight: ``[D, C, P, P]`` float32 patch-embedding filters, or None.
        decoder: the classifier's head after the last block, a float32 CPU copy
            (:class:`vitviz.capture.mechanistic.TokenDecoder`: decodes any layer's stored tokens, the logit lens's
            class map), or None (a feature model, a module vitviz only adapted).
        final_norm: a float32 CPU copy of the model's final norm over the tokens (``model.norm`` of a vitviz ViT),
            or None (a model that norms after pooling, or one vitviz did not build): :meth:`after_final_norm`.
        rope_angles: the rotary embedding's angles at ``grid``, float32 ``[gh*gw, F]`` (the same for every layer
            and head) or ``[L, H, gh*gw, F]`` (mixed RoPE: learned per layer and head); None without RoPE.
    """

    def __init__(self, grid: tuple[int, int], pos_embed: torch.Tensor | None,
                 patch_embed_weight: torch.Tensor | None, decoder: Any = None,
                 final_norm: torch.nn.Module | None = None, rope_angles: torch.Tensor | None = None):
        self.grid = (int(grid[0]), int(grid[1]))
        self.pos_embed = pos_embed
        self.patch_embed_weight = patch_embed_weight
        self.decoder = decoder
        self.final_norm = final_norm
        self.rope_angles = rope_angles
        self._lock = threading.Lock()
        self._cache: dict[Any, Any] = {}

    def _get(self, key: Any, fn) -> Any:
        with self._lock:
            if key not in self._cache:
                self._cache[key] = fn()
            return self._cache[key]

    def after_final_norm(self, tokens: torch.Tensor) -> torch.Tensor | None:
        """``tokens [..., D]`` (the last block's output) through the model's final norm, float32; None without one."""
        if self.final_norm is None:
            return None
        with torch.no_grad():
            return self.final_norm(tokens.detach().to("cpu", torch.float32))

    @property
    def pos_similarity_kind(self) -> str | None:
        """What :meth:`pos_similarity` shows: ``"table"`` (cosine similarity of the learned / fixed position
        embeddings), ``"rope"`` (the RoPE kernel of a model with rotary and no table), or None (neither)."""
        pe = self.pos_embed
        if pe is not None and pe.shape[0] >= self.grid[0] * self.grid[1]:
            return "table"
        return "rope" if self.rope_angles is not None else None

    def rope_similarity(self) -> np.ndarray | None:
        """``[gh, gw, gh, gw]`` RoPE kernel (:func:`vitviz.analysis.rope_kernel`, averaged over heads and layers),
        or None without RoPE."""
        if self.rope_angles is None:
            return None
        return self._get("ropesim", lambda: to_numpy(A.rope_kernel(self.rope_angles, grid=self.grid)))

    def pos_similarity(self) -> np.ndarray | None:
        """``[gh, gw, gh, gw]`` cosine similarity of the position embeddings; for a model with RoPE and no position
        table, the RoPE kernel (:attr:`pos_similarity_kind` says which); None when the model has neither."""
        pe = self.pos_embed
        if pe is None or pe.shape[0] < self.grid[0] * self.grid[1]:
            return self.rope_similarity()
        p = pe.shape[0] - self.grid[0] * self.grid[1]
        return self._get("possim", lambda: to_numpy(A.position_embedding_similarity(pe[None], grid=self.grid,
                                                                                     num_prefix_tokens=p)))

    def filters(self, k: int = 28) -> np.ndarray | None:
        """``[k, P, P, C]`` principal components of the patch-embedding filters, in [0, 1].

        Each component is scaled on its own, so the first k of a longer list are the same: one decomposition
        serves every ``k`` up to the most asked for.
        """
        w = self.patch_embed_weight
        if w is None:
            return None
        k = min(k, w.shape[0], w[0].numel())
        with self._lock:
            have = self._cache.get("filters")
            if have is None or have.shape[0] < k:
                have = self._cache["filters"] = to_numpy(A.embedding_filters(w, k=k))
        return have[:k]

    @classmethod
    def of(cls, model: torch.nn.Module, grid: tuple[int, int]) -> "ModelData":
        pos = getattr(model, "pos_embed", None)
        pos_embed = None
        if pos is not None:
            try:
                pos_embed = model.pos_embed_for(tuple(grid))[0].detach().float().cpu()
            except Exception:  # noqa: BLE001 - a model without resampling support still shows the other views
                pos_embed = pos[0].detach().float().cpu()
        pe = getattr(model, "patch_embed", None)
        weight = pe.proj.weight.detach().float().cpu() if pe is not None and hasattr(pe, "proj") else None
        norm = getattr(model, "norm", None)
        final = None
        if isinstance(model, ViT) and isinstance(norm, (torch.nn.LayerNorm, torch.nn.RMSNorm)):
            final = copy.deepcopy(norm).to("cpu", torch.float32).eval()
        rope = getattr(model, "rope", None)
        angles = None
        if isinstance(rope, RotaryEmbedding):
            with torch.no_grad():
                angles = rope.angles(tuple(grid)).detach().float().cpu()
        return cls(grid, pos_embed, weight, decoder=token_decoder(model), final_norm=final, rope_angles=angles)


@dataclass
class PreparedImage:
    """One image ready for the model (:meth:`Pipeline.prepare`): the normalised input ``x [C, h, w]`` (float32),
    where its crop lies in the image, and the image's pixels uint8 ``[H, W, 3]``."""

    x: torch.Tensor
    geometry: CropGeometry
    rgb: np.ndarray


@dataclass
class InferenceResult:
    """One image through one model: everything the views need, on the CPU.

    Attentions, tokens and attention gradients are in the model's precision (:attr:`Pipeline.store_dtype`: float32,
    or bfloat16 / float16 for a model run in it); logits, scores and LeGrad's and GradCAM's maps are float32. The
    :mod:`vitviz.analysis` functions take either (they promote what they read); call ``.float()`` before
    ``.numpy()`` on a reduced-precision tensor.

    The per-image tensors are those of :meth:`vitviz.capture.Capture.image` (``capture``); the properties below
    read them from there.

    Attributes:
        source: the image file (or a name such as ``"pasted image"``).
        rgb: the full image, uint8 ``[H, W, 3]`` (EXIF rotation applied).
        geometry: where the model's input crop lies in the image.
        capture: attentions ``[L, H, N, N]``, tokens ``[L+1, N, D]``, attention gradients, logits ``[K]``, target.
        model_data: position embeddings and filters of the model (shared by every result of that model and grid).
        model_name, device, precision: for captions and the status bar.
        labels: class names (None when the model has none).
        num_registers: register tokens among the prefix tokens (Darcet et al. 2023), 0 for most models.
        num_classes: classes of the model's head (0: a feature model, whose output is not class scores; None:
            unknown).

    The maps and statistics are not part of the result: the views and the session compute them from these tensors
    with the :mod:`vitviz.analysis` functions when they are first shown, and cache them per result.
    """

    source: str
    rgb: np.ndarray
    geometry: CropGeometry
    capture: ImageCapture
    model_data: ModelData | None = None
    model_name: str = "model"
    device: str = "cpu"
    precision: str = "fp32"
    labels: tuple[str, ...] | None = None
    num_registers: int = 0  # register tokens (the last of the prefix tokens)
    num_classes: int | None = None  # classes of the model's head; 0: a feature model (logits are its features)
    probability: str = "softmax"  # "sigmoid": each class's probability is its logit's sigmoid (SigLIP's prompts)
    head_kind: str = "classifier"  # "prompts": the classes are text prompts on a CLIP / SigLIP tower

    # ------------------------------------------------------------------ the capture's fields
    @property
    def attentions(self) -> torch.Tensor:
        return self.capture.attentions

    @property
    def tokens(self) -> torch.Tensor:
        return self.capture.tokens

    @property
    def attention_grads(self) -> torch.Tensor | None:
        return self.capture.attention_grads

    @property
    def pool_attention(self) -> torch.Tensor | None:
        """``[H, N]``: the attention-pooling head's row over the tokens (SigLIP), the "[CLS] row" of a model
        without a class token; None for other models."""
        return getattr(self.capture, "pool_attention", None)

    @property
    def pool_attention_grad(self) -> torch.Tensor | None:
        return getattr(self.capture, "pool_attention_grad", None)

    @property
    def logits(self) -> torch.Tensor:
        return self.capture.logits

    @property
    def target(self) -> int | None:
        """The class whose logit the gradients explain, or None (no gradients, or a target that is not a class)."""
        return self.capture.target

    @property
    def target_spec(self) -> Any:
        """What the gradients explain (:mod:`vitviz.capture.targets`), or None when the result has no gradients."""
        return getattr(self.capture, "target_spec", None)

    @property
    def target_score(self) -> float | None:
        """The target's value for this image (a logit, a similarity ...), or None."""
        return getattr(self.capture, "score", None)

    def target_text(self) -> str | None:
        """The target in words: the class's label, "similar to image cat.jpg", the function's name; None without
        one."""
        spec = self.target_spec
        if spec is None:
            return None if self.target is None else self.label(self.target)
        if getattr(spec, "kind", "") == "class":
            return self.label(self.target) if self.target is not None else spec.describe(self.labels)
        return spec.describe(self.labels)

    @property
    def legrad(self) -> dict[str, torch.Tensor]:
        """LeGrad's per-layer maps ``[L, gh * gw]`` by pooling (empty without gradients)."""
        return getattr(self.capture, "legrad", None) or {}

    @property
    def gradcam(self) -> torch.Tensor | None:
        """GradCAM's per-layer maps ``[L, gh * gw]``, or None."""
        return getattr(self.capture, "gradcam", None)

    @property
    def grid(self) -> tuple[int, int]:
        return self.capture.grid

    @property
    def patch_size(self) -> int:
        return self.capture.patch_size

    @property
    def num_prefix_tokens(self) -> int:
        return self.capture.num_prefix_tokens

    @property
    def pos_embed(self) -> torch.Tensor | None:
        return None if self.model_data is None else self.model_data.pos_embed

    @property
    def patch_embed_weight(self) -> torch.Tensor | None:
        return None if self.model_data is None else self.model_data.patch_embed_weight

    # ------------------------------------------------------------------ derived
    @property
    def num_layers(self) -> int:
        return int(self.attentions.shape[0])

    @property
    def num_heads(self) -> int:
        return int(self.attentions.shape[1])

    @property
    def num_patches(self) -> int:
        return self.grid[0] * self.grid[1]

    @property
    def image_size(self) -> tuple[int, int]:
        return (int(self.rgb.shape[0]), int(self.rgb.shape[1]))

    @property
    def probabilities(self) -> torch.Tensor:
        """The classes' probabilities: the softmax of the logits, or each logit's sigmoid where the model says so
        (SigLIP's prompts)."""
        if self.probability == "sigmoid":
            return torch.sigmoid(self.logits.float())
        return torch.softmax(self.logits.float(), dim=-1)

    def label(self, index: int) -> str:
        if self.labels is not None and 0 <= index < len(self.labels):
            return self.labels[index]
        return f"class {index}"

    def excluding(self, patches: Any) -> "InferenceResult":
        """This result with the given patch tokens ignored as attention keys: their columns removed from every
        layer's attention, rows renormalised, their gradient columns dropped
        (:func:`vitviz.analysis.exclude_tokens`); tokens, logits and the rest shared (the views compute their maps
        from the new attention).

        Args:
            patches: bool ``[gh * gw]`` over the patch tokens.
        """
        mask = torch.as_tensor(np.asarray(patches, dtype=bool).reshape(-1))
        attn, grads = A.exclude_tokens(self.attentions, mask, num_prefix_tokens=self.num_prefix_tokens,
                                       grads=self.attention_grads)
        return replace(self, capture=replace(self.capture, attentions=attn, attention_grads=grads))

    def top_k(self, k: int = 5) -> list[tuple[int, str, float]]:
        """``[(class index, label, probability)]`` for the k most probable classes; empty for a model without a
        classifier (DINO, DINOv2, CLIP / SigLIP towers: its output is features, not class scores)."""
        if self.num_classes == 0:
            return []
        p = self.probabilities
        k = min(k, p.numel())
        vals, idx = p.topk(k)
        return [(int(i), self.label(int(i)), float(v)) for v, i in zip(vals, idx)]
