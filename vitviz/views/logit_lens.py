"""The logit lens per patch: after a block, the class each patch token decodes to when the model's own head reads it
alone (the final norm, an attention-pool head over that one token, ``fc_norm``, the head; a prompt model's prompts):
a class map per layer (:class:`vitviz.capture.mechanistic.TokenDecoder`, held by the result's model data).

Drawn as colours of its own (``rgb``): the nine classes most patches decode to at that layer each get a colour of
matplotlib's ``tab10`` (named in the caption), the others grey. :meth:`compute` gives the decoded class's
probability, the value read out under the cursor. Needs a classifier (a feature model's output is not class
scores) and no gradients.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from vitviz.views.base import as_grid
from vitviz.views.kinds import TokenView

# matplotlib's tab10 (its first nine; grey, the eighth, is kept for "other classes") with the colours' names
PALETTE: tuple[tuple[str, tuple[float, float, float]], ...] = (
    ("blue", (0.122, 0.467, 0.706)), ("orange", (1.0, 0.498, 0.055)), ("green", (0.173, 0.627, 0.173)),
    ("red", (0.839, 0.153, 0.157)), ("purple", (0.580, 0.404, 0.741)), ("brown", (0.549, 0.337, 0.294)),
    ("pink", (0.890, 0.467, 0.761)), ("olive", (0.737, 0.741, 0.133)), ("cyan", (0.090, 0.745, 0.812)),
)
OTHER = ("grey", (0.498, 0.498, 0.498))


class LogitLensClasses(TokenView):
    key = "logit_lens"
    title = "Logit lens classes"
    reads = frozenset({"layer"})
    quantity = "probability of the decoded class"
    unit = "probability"
    uses_attention = False
    rgb = True

    def layer_range(self, result):
        return (0, result.num_layers - 1)

    def layer_text(self, layer):
        return f"output of layer {max(0, layer)}"

    def unavailable(self, result):
        if getattr(getattr(result, "model_data", None), "decoder", None) is None:
            return ("the logit lens decodes tokens into classes: it needs a classifier (a feature model's output is "
                    "an embedding) that vitviz converted (not an adapted module)")
        return None

    def decoded(self, result, options) -> tuple[np.ndarray, np.ndarray]:
        """``(classes [P] int, probability [P])`` of each patch token after block ``options.layer`` (layer -1 reads
        as 0: the lens starts after the first block)."""
        layer = max(0, int(options.layer))
        p = result.num_prefix_tokens
        out, _ = result.model_data.decoder(result.tokens[layer + 1][None, p:])
        logits = out[0].float()
        probs = logits.sigmoid() if result.probability == "sigmoid" else logits.softmax(-1)
        best = probs.max(-1)
        return best.indices.numpy(), best.values.numpy()

    def colours(self, classes: np.ndarray) -> list[tuple[int, str, tuple[float, float, float]]]:
        """``(class, colour name, rgb)`` of the nine most frequent classes (most frequent first)."""
        common = [c for c, _ in Counter(classes.tolist()).most_common(len(PALETTE))]
        return [(c, *PALETTE[i]) for i, c in enumerate(common)]

    def compute(self, result, options):
        if self.unavailable(result):
            return None
        return as_grid(self.decoded(result, options)[1], result.grid)

    def compute_rgb(self, result, options):
        if self.unavailable(result):
            return None
        classes, _ = self.decoded(result, options)
        rgb = np.tile(np.array(OTHER[1] + (1.0,), dtype=np.float32), (classes.size, 1))
        for c, _, colour in self.colours(classes):
            rgb[classes == c, :3] = colour
        return np.ascontiguousarray(rgb.reshape(*result.grid, 4))

    def legend(self, result, options) -> str:
        """The colours in words: "blue: tabby cat, orange: tiger cat, ...; grey: others"."""
        classes, _ = self.decoded(result, options)
        named = self.colours(classes)
        words = ", ".join(f"{name}: {result.label(c)}" for c, name, _ in named)
        return words + ("; grey: other classes" if len(set(classes.tolist())) > len(named) else "")

    def caption_parts(self, result, options):
        parts = super().caption_parts(result, options)
        if result is not None and not self.unavailable(result):
            parts.append(self.legend(result, options))
        return parts

    def rgb_text(self, options):
        return "the class each patch token decodes to (the model's head on that token alone)"


VIEW = LogitLensClasses()
