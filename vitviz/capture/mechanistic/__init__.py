"""vitviz.capture.mechanistic: which component does what -- the logit lens (:func:`logit_lens`), head knock-out
(:func:`head_knockout`) and activation patching (:func:`activation_patching`), each a batch of forward passes of a
vitviz ViT from its clean residual stream (:class:`ResidualStream`). No Qt."""

from __future__ import annotations

from vitviz.capture.mechanistic.knockout import KNOCKOUT_MODES, KnockoutResult, head_knockout
from vitviz.capture.mechanistic.lens import LensResult, TokenDecoder, decode_tokens, logit_lens, token_decoder
from vitviz.capture.mechanistic.patching import PatchingResult, activation_patching
from vitviz.capture.mechanistic.residual import MechanisticError, ResidualStream

__all__ = ["KNOCKOUT_MODES", "KnockoutResult", "LensResult", "MechanisticError", "PatchingResult", "ResidualStream",
           "TokenDecoder", "activation_patching", "decode_tokens", "head_knockout", "logit_lens", "token_decoder"]
