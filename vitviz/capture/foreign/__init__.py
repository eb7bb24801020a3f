"""Capture the attention of any PyTorch Vision Transformer module, not only :class:`vitviz.model.ViT`.

:func:`vitviz.capture.capture` sends every module that is not a vitviz ViT here (:func:`capture_module`). What it
looks for, in this order (:func:`find_layout`):

1. ``attention=``: module paths the user names (``"encoder.layers.*.attn"``, ``*`` = one path component). Inside
   each, the one ``softmax`` over the last axis it computes is recorded (a :class:`torch.overrides.TorchFunctionMode`
   sees ``torch.softmax``, ``Tensor.softmax``, ``F.softmax`` and ``nn.Softmax``); a call of
   ``F.scaled_dot_product_attention`` there is recomputed explicitly (``softmax(q k^T * scale + mask) @ v``) so that
   the probabilities exist and lie on the path from input to output.
2. ``torch.nn.MultiheadAttention`` submodules: for the duration of the pass their ``forward`` is an explicit
   re-implementation of :func:`torch.nn.functional.multi_head_attention_forward` that computes the per-head
   probabilities ``[B, H, N, N]`` and uses *them* for the output (so their gradients are the true gradients of the
   output), and returns what the caller asked for (``need_weights``, ``average_attn_weights``) as the module does.
3. Models whose ``forward`` takes ``output_attentions`` (and returns the probabilities of every layer): called with
   ``output_attentions=True``; the returned tensors are the ones recorded (a tensor the output does not depend on
   gets no gradient, and that is said).
4. Modules whose class name says attention (``...Attention``, ``...Attn``; innermost ones): timm's ``Attention``
   and Hugging Face's ``ViTAttention`` / ``ViTSelfAttention`` among them. As in 1; a boolean ``fused_attn`` flag
   (timm) is switched off for the pass so that the module's own explicit path runs.

Transformer blocks are the largest ancestors of the attention modules that hold no other attention module and are
called (not a ModuleList; route 3: the outermost list of same-class modules), or ``blocks=``; their outputs are the
tokens (``tokens[0]`` is the input of the first block), and each block must take exactly what the one before gave.
The patch grid is read from the patch-embedding convolution's output (a ``Conv2d`` with
kernel = stride that the images go through), or computed from ``patch_size=`` / ``grid=``; the prefix-token count
is the attention's token count minus the patches. Every inference is checked against what the pass actually did
(each attention module fired exactly once, rows sum to 1, token counts agree, the user's numbers agree with the
model's), and a mismatch is a :class:`~vitviz.capture.CaptureError` naming what was seen.

:class:`AdaptedModel` wraps such a module with what the pipeline and the window ask of a model (a spec with the
preprocessing and labels, the patch size, the position embedding, the patch-embedding filters), so that
:class:`vitviz.pipeline.Pipeline`, :func:`vitviz.show` and ``vitviz --model file.py:Class`` take any of them.
The user's own ``file.py:Class`` is imported by :mod:`vitviz.model.sources.user_module` and adapted where a model is
opened (:func:`vitviz.pipeline.open_adapted`).

The modules: :mod:`.layout_finder` (where the attention, blocks and patch embedding are), :mod:`.explicit_attention`
(``nn.MultiheadAttention`` and SDPA written out), :mod:`.recording` (one capture; :class:`ForwardError` when the
module's own forward raises, naming its ``file.py:Class``), :mod:`.adapted`
(:class:`AdaptedModel`, :func:`adapt`, :func:`capture_module`). This package never imports Qt.
"""

from __future__ import annotations

from vitviz.capture.foreign.adapted import AdaptedModel, AdaptedSpec, adapt, capture_module
from vitviz.capture.foreign.explicit_attention import mha_forward, sdpa_explicit
from vitviz.capture.foreign.layout_finder import Layout, find_layout, is_vitviz_model
from vitviz.capture.foreign.recording import ForwardError, logits_of, module_origin

__all__ = ["AdaptedModel", "AdaptedSpec", "ForwardError", "Layout", "adapt", "capture_module", "find_layout",
           "is_vitviz_model", "logits_of", "mha_forward", "module_origin", "sdpa_explicit"]
