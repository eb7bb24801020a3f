"""A throw-away view of a known input kind (the tokens of a layer), written as a new view is: one module. The test
that uses it (test_new_view_of_a_known_kind.py) adds the registry line, ``views.register(VIEW)``."""

from vitviz import analysis as A
from vitviz.views import TokenView, as_grid


class HalfTokenNorm(TokenView):
    key = "half_token_norm"
    title = "Half the token norm (test view)"
    reads = frozenset({"layer"})
    quantity = "half the token norm"

    def compute(self, result, options):
        p = result.num_prefix_tokens
        return as_grid(A.token_norms(result.tokens)[options.layer + 1, p:] / 2, result.grid)


VIEW = HalfTokenNorm()
