"""Weights in timm's layout whose architecture has a part in no tensor that vitviz's reading would get wrong: refused in
one line naming the part. No Qt. (RoPE, the commonest such part, is :mod:`.bare_rope`'s.)

Found by sweeping every ViT-like architecture timm registers, built small and saved as its weights alone
(``tests/model/test_bare_sweep.py``); each mark below is checked there against timm's own model classes:

- **Residual post-norm blocks** (``x + norm(f(x))``; their norms hold the same names as pre-norm ones):
  EVA-02 enormous (``eva02_enormous_patch14_*``, timm's ``EvaBlockPostNorm``; open_clip's ``EVA02-E-14*`` trunk) by
  its exact shapes, width 1792 with a 15360-wide plain MLP (no other timm ViT has them); timm's
  ``vit_base_patch16_rpn_224`` (``ResPostBlock``) by its keys: ``fc_norm`` with no [CLS], no register, no final
  ``norm`` and no qkv bias (the ``*_gap_*`` ViTs keep a final norm or registers).
- **The MLP activation of a CLIP tower** (``norm_pre``, timm's CLIP layout): GELU or OpenAI's QuickGELU
  (``*_clip_quickgelu_*``) is in no tensor; a timm folder's ``config.json`` architecture says which. Likewise a
  SigLIP tower (``attn_pool.latent``): GELU, or the tanh approximation (``vit_*_siglip_256`` and others).
- **An attention-pool head beside prefix tokens** (``attn_pool.latent`` with ``cls_token`` or ``reg_token``): timm's
  pool reads the patch tokens only unless ``pool_include_prefix`` (``vit_so150m_patch16_reg4_map_256`` reads them
  not, ``test_vit3`` does), which no tensor records; vitviz's pool reads every token. Refused with or without
  ``config.json``.
"""

from __future__ import annotations

from collections.abc import Mapping

from vitviz.model.checkpoints.common import RawCheckpoint, err

ENORMOUS_FC1 = (15360, 1792)  # timm eva02_enormous_patch14_*: embed_dim 1792, mlp_ratio 15360 / 1792, post-norm


def _has_timm_config(raw: RawCheckpoint) -> bool:
    return isinstance(raw.hf_config, Mapping) and "architecture" in raw.hf_config


def unread_part(raw: RawCheckpoint) -> str | None:
    """The part of ``raw`` (timm's layout) that no tensor records and vitviz would read wrong, or None."""
    keys = raw.tensors.keys()
    if "patch_embed.proj.weight" not in keys or not any(k.startswith("blocks.") for k in keys):
        return None
    prefix = [k for k in ("cls_token", "reg_token") if k in keys]
    if "attn_pool.latent" in keys and prefix:
        return (f"an attention-pool head ('attn_pool.latent') beside prefix tokens ({prefix[0]!r}): whether the pool "
                "reads them (timm's pool_include_prefix) is in no tensor, and vitviz's pool reads every token")
    if _has_timm_config(raw):
        return None  # a timm folder: its architecture says the rest (timm.refuse_unmodelled)
    fc1 = raw.tensors.get("blocks.0.mlp.fc1.weight")
    if fc1 is not None and tuple(fc1.shape) == ENORMOUS_FC1:
        return ("residual post-norm blocks (EVA-02 enormous: width 1792 with a 15360-wide MLP, timm's "
                "eva02_enormous_patch14_* / open_clip's EVA02-E-14), which no key shows and vitviz does not model")
    if "fc_norm.weight" in keys and not prefix and "norm.weight" not in keys and \
            "blocks.0.attn.qkv.bias" not in keys and "blocks.0.attn.qkv.weight" in keys:
        return ("residual post-norm blocks (timm's vit_*_rpn_*: fc_norm with no [CLS], register, final norm or qkv "
                "bias), which no key shows and vitviz does not model")
    if "norm_pre.weight" in keys:
        return ("a CLIP tower ('norm_pre') whose MLP activation (GELU, or OpenAI's QuickGELU) is in no tensor; open "
                "its hub folder with its config.json (timm's 'architecture' names it)")
    if "attn_pool.latent" in keys:
        return ("a SigLIP tower (attention-pool head) whose MLP activation (GELU, or the tanh approximation of timm's "
                "*_siglip_256/384/512 towers) is in no tensor; open its hub folder with its config.json")
    return None


def refuse_unread_parts(raw: RawCheckpoint) -> None:
    """Raise one line naming the part when ``raw`` has one vitviz would read wrong (:func:`unread_part`)."""
    why = unread_part(raw)
    if why is not None:
        raise err(raw.origin, f"refused rather than opened with a part misread: {why}")
