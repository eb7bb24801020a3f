"""The L2 norm of every patch token after a layer: where the high-norm "artefact" tokens are (Darcet et al. 2023)."""

from __future__ import annotations

from vitviz import analysis as A
from vitviz.views.base import as_grid
from vitviz.views.kinds import TokenView


class TokenNorm(TokenView):
    key = "token_norm"
    title = "Token norm"
    reads = frozenset({"layer"})
    quantity = "token norm"
    unit = "L2"

    def compute(self, result, options):
        p = result.num_prefix_tokens
        return as_grid(A.token_norms(result.tokens)[options.layer + 1, p:], result.grid)


VIEW = TokenNorm()
