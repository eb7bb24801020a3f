"""Load and save ViT checkpoints: native vitviz, timm, torchvision, Hugging Face and Google ``.npz``.

``load_checkpoint(source)`` accepts a file, a directory or an in-memory state dict. The file type is recognised by
its structure (safetensors header, zip archive, legacy torch pickle; see :mod:`.reading`), the checkpoint *format*
by its keys (the ordered registry :data:`FORMATS`, one module per format), and the architecture is inferred from
tensor shapes:

=============  ==============================================================  ===================================
format         recognised by                                                   preprocessing default
=============  ==============================================================  ===================================
native         safetensors metadata ``vitviz_spec`` (written by                the saved spec
               :func:`save_checkpoint`)
timm           ``patch_embed.proj.weight`` + ``blocks.0.attn.qkv.weight``      distilled (``dist_token``): ImageNet
                                                                               mean/std; otherwise mean = std = 0.5;
                                                                               bicubic, crop_pct 0.875 (1.0 above
                                                                               224 px)
torchvision    ``conv_proj.weight`` + ``encoder.layers.encoder_layer_0.*``     224 px: resize 256 bilinear, crop
                                                                               224, ImageNet mean/std (V1 weights);
                                                                               other sizes: SWAG E2E (resize = crop,
                                                                               bicubic)
hf             ``[vit.]embeddings.patch_embeddings.projection.weight``         ``preprocessor_config.json`` if
                                                                               present, else resize to the input
                                                                               size, bilinear, mean = std = 0.5
npz            ``embedding/kernel`` + ``Transformer/...`` (Google vit_jax /    mean = std = 0.5
               big_vision)
timm-beit      timm BEiT: ``attn.q_bias`` / ``gamma_1`` / relative tables      ``pretrained_cfg``, else BEiT's
dinov2         DINOv2's own ``.pth``: ``mask_token`` + ``blocks.0.ls1.gamma``  DINOv2's (ImageNet, crop 1.0)
hf-dinov2      HF ``Dinov2Model`` / ``Dinov2WithRegistersModel``               ``preprocessor_config.json``, else
hf-beit        HF ``Beit*`` / ``Data2VecVision*`` (``lambda_1``, tables)       the family's default
hf-clip        HF ``CLIPVisionModel[WithProjection]`` / ``CLIPModel``          (:data:`vitviz.model.spec.
hf-siglip      HF ``SiglipVisionModel`` / ``SiglipModel`` (``head.probe``)     FAMILY_PREPROCESS`)
hf-dinov3      HF ``DINOv3ViTModel`` (``layer.*.attention.q_proj``, RoPE)      ``preprocessor_config.json``, else
                                                                               DINOv2's
timm-eva       timm folders of RoPE models by ``config.json`` architecture    ``pretrained_cfg``
               (EVA-02 and its CLIP towers, Perception Encoder, DINOv3,
               ``vit_*_rope_*``)
timm-naflex    timm folders of ``naflexvit_*`` (fixed-grid use)               ``pretrained_cfg``
hf-aimv2       HF ``Aimv2VisionModel`` / ``Aimv2Model`` (``rms_norm1``)        ``preprocessor_config.json``, else
                                                                               OpenAI CLIP's
open_clip      ``visual.class_embedding`` (open_clip, OpenAI)                  ``open_clip_config.json``, else
                                                                               OpenAI CLIP mean/std
open_clip-     ``visual.trunk.*`` + ``open_clip_config.json``                  as open_clip
timm           ``timm_model_name`` (EVA02-*: read as timm-eva)
=============  ==============================================================  ===================================

A timm folder's ``config.json`` (``architecture``, ``model_args``, ``pretrained_cfg``) is read by the timm formats;
without it the family is guessed from the shapes (:func:`vitviz.model.spec.guess_family`), except for RoPE models: the
bare weights of a timm RoPE model are refused naming RoPE (:mod:`.bare_rope`). Swin and other
windowed-attention models are refused with a message naming what is supported (``registry.windowed_attention``).

The number of heads comes from the config where there is one (native, HF); otherwise from the paper's table of
widths (192: 3, 384: 6, 768: 12, 1024: 16, 1280: 16), otherwise head_dim 64; ``num_heads=`` overrides it.
1000-class heads without labels of their own get the ImageNet-1k class names (torchvision's list).

Settings read from files (the native spec, ``config.json``, ``preprocessor_config.json``) are checked field by
field, declared sizes against the tensors actually present, and the parameter memory against the machine's before
anything is allocated. Every problem raises :class:`CheckpointError` (a ``ValueError``) whose message starts with
the file and names the problem. Pickled files (``.pth``, ``.bin``, ``.pt``) are read with
``torch.load(..., weights_only=True)`` only. No Qt here.
"""

from __future__ import annotations

from vitviz.model.checkpoints.common import (
    KNOWN_HEADS,
    CheckpointError,
    Converted,
    PreprocessArg,
    RawCheckpoint,
    imagenet_labels,
    infer_config,
    resolve_preprocess,
)
from vitviz.model.checkpoints.loader import load_checkpoint
from vitviz.model.checkpoints.native import FORMAT_TAG as NATIVE_FORMAT_TAG
from vitviz.model.checkpoints.reading import read_raw
from vitviz.model.checkpoints.registry import FORMAT_NAMES, FORMATS, Format, detect_format, format_module
from vitviz.model.checkpoints.saving import save_checkpoint

__all__ = [
    "FORMATS",
    "FORMAT_NAMES",
    "KNOWN_HEADS",
    "NATIVE_FORMAT_TAG",
    "CheckpointError",
    "Converted",
    "Format",
    "PreprocessArg",
    "RawCheckpoint",
    "detect_format",
    "format_module",
    "imagenet_labels",
    "infer_config",
    "load_checkpoint",
    "read_raw",
    "resolve_preprocess",
    "save_checkpoint",
]
