"""LeGrad (Bousselham et al., ICCV 2025): the target's sensitivity to each layer's attention, summed over layers.

Per layer l from the start layer: the target applied to the model's head on layer l's tokens (pooled as the
official code pools: the mean over all tokens, then the final norm and head or projection; an attention-pool model's
pool on the layer's tokens, the gradient at the pool's attention), ``ReLU(d s_l / d A_l)`` averaged over heads and
query rows, prefix columns dropped; the map is the sum (:mod:`vitviz.capture.gradient_maps`). The default start is
the official one (the last two layers); the slider moves it; the model's own pooling is an option.
"""

from __future__ import annotations

from vitviz import analysis as A
from vitviz.views.base import as_grid
from vitviz.views.kinds import ResultView

POOLING_WORDS = {"mean": "mean of all tokens", "model": "the model's own pooling"}


class LeGrad(ResultView):
    key = "legrad"
    title = "LeGrad"
    reads = frozenset({"legrad_start", "legrad_pooling", "legrad_correction", "target"})
    quantity = "LeGrad"
    unit = "a.u."
    needs_grads = True
    uses_attention = False  # its gradients are taken during the pass: "ignore artefact tokens" does not change it
    heads_note = "mean of heads"
    diffuse_when_small = True

    @property
    def slider(self):
        return "legrad_start"

    @property
    def slider_label(self):
        return "Start layer"

    def attention_layer(self, options):
        """The heads panel shows the start layer's heads (once a result has resolved a start counted from the end)."""
        return max(0, options.legrad_start)

    def unavailable(self, result):
        why = super().unavailable(result)
        if why is None and not result.legrad:
            return "LeGrad is taken during vitviz's own ViT's pass; this model is a module vitviz adapted"
        return why

    def unavailable_at(self, result, options):
        """Why the map cannot be shown at these options (None when it can): the pooling not taken in this pass."""
        why = self.unavailable(result)
        if why is None and options.legrad_pooling not in result.legrad:
            return (f"LeGrad pooled by {POOLING_WORDS[options.legrad_pooling]} was not taken in this image's pass "
                    "(analyse the image again)")
        return why

    def plan_stream(self, plan, result, options):
        """The pass takes LeGrad's per-layer maps at the option's pooling (with the gradients)."""
        if not self.unavailable(result):
            plan.legrad.add(str(options.legrad_pooling))

    def compute(self, result, options):
        if self.unavailable(result):
            return None
        maps = result.legrad.get(options.legrad_pooling)
        if maps is None:  # taken for the other pooling only (the window re-runs the image when the pooling changes)
            return None
        start = self.slider_value(options, result)
        return as_grid(A.legrad_map(maps, start, result.grid, self.neutral(result, options)), result.grid)

    @staticmethod
    def neutral(result, options):
        """The neutral prompt's maps when the correction applies (SigLIP prompts), else None."""
        if not options.legrad_correction:
            return None
        return result.legrad.get(f"{options.legrad_pooling}|neutral")

    def pooling_words(self, result, options) -> str:
        words = POOLING_WORDS[options.legrad_pooling]
        if result is not None and result.pool_attention is not None:
            words = ("the pooling head on each layer's tokens" if options.legrad_pooling == "mean"
                     else "the final norm and the pooling head")
        return words

    def caption_parts(self, result, options):
        parts = super().caption_parts(result, options)
        if result is not None:
            last = result.num_layers - 1
            start = self.slider_value(options, result)
            i = parts.index(self.slider_text(start))
            parts[i] = f"layers {start}–{last}" if start < last else f"layer {last}"
        parts.append(f"pooled: {self.pooling_words(result, options)}")
        if result is not None and self.neutral(result, options) is not None:
            parts.append("neutral-prompt correction")
        return parts

    def file_stem(self, result, options):
        stem = super().file_stem(result, options)
        start = self.slider_value(options, result)
        return stem.replace(self.key, f"{self.key}_from{start}_{options.legrad_pooling}", 1)


VIEW = LeGrad()
