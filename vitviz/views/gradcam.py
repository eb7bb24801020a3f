"""GradCAM for ViTs (Selvaraju et al. 2017, as pytorch-grad-cam computes it on a ViT): activations and gradients at
the output of a block's ``norm1`` (default the last block, the layer pytorch-grad-cam's ViT tutorial hooks), channel
weights from the gradient averaged over the patch tokens, ReLU of the weighted sum; prefix tokens dropped. The
baseline every paper compares against."""

from __future__ import annotations

from vitviz import analysis as A
from vitviz.views.base import as_grid
from vitviz.views.kinds import ResultView


class GradCAM(ResultView):
    key = "gradcam"
    title = "GradCAM"
    reads = frozenset({"gradcam_layer", "target"})
    quantity = "GradCAM"
    unit = "a.u."
    needs_grads = True
    uses_attention = False
    heads_note = "norm1 output"
    diffuse_when_small = True

    @property
    def slider(self):
        return "gradcam_layer"

    @property
    def slider_label(self):
        return "Block"

    def slider_text(self, value):
        return f"block {value}"

    def attention_layer(self, options):
        return max(0, options.gradcam_layer)

    def unavailable(self, result):
        why = super().unavailable(result)
        if why is None and result.gradcam is None:
            return "GradCAM is taken during vitviz's own ViT's pass; this model is a module vitviz adapted"
        return why

    def plan_stream(self, plan, result, options):
        """The pass takes GradCAM's per-block maps (with the gradients)."""
        plan.gradcam = plan.gradcam or not self.unavailable(result)

    def compute(self, result, options):
        if self.unavailable(result):
            return None
        return as_grid(A.gradcam_map(result.gradcam, self.slider_value(options, result), result.grid), result.grid)

    def file_stem(self, result, options):
        stem = super().file_stem(result, options)
        return stem.replace(self.key, f"{self.key}_B{self.slider_value(options, result)}", 1)


VIEW = GradCAM()
