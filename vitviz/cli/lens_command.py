"""``vitviz lens MODEL IMAGE [--top K] [--csv F]``: the logit lens (:func:`vitviz.capture.mechanistic.logit_lens`):
after every block, the model's own head read off that block's output; a row per layer and rank (``layer`` 0: after
the first block; ``class``, ``label``, ``probability``, ``logit``). A feature model with a similarity target gives one
row per layer: the similarity as ``logit``, no class."""

from __future__ import annotations

import argparse

from vitviz.cli.commands import summary
from vitviz.cli.mechanistic_flags import add_common, emit, prepare, read_inputs
from vitviz.cli.shared import Reporter

HEADER = ("layer", "rank", "class", "label", "probability", "logit")


def add_parser(sub) -> None:
    p = sub.add_parser("lens", help=summary("lens"),
                       description="The logit lens: after every block, the model's final norm, pooling and head "
                                   "applied to that block's output. A row per layer and rank.")
    p.add_argument("model", metavar="MODEL", help="checkpoint file or folder, a pretrained name, 'demo' or "
                                                  "random:ARCH")
    p.add_argument("image", metavar="IMAGE")
    p.add_argument("--top", type=int, default=5, help="classes per layer (default 5)")
    add_common(p)


def run(args: argparse.Namespace, report: Reporter) -> int:
    from vitviz.capture.mechanistic import logit_lens

    if args.top < 1:
        raise ValueError(f"--top {args.top}: must be at least 1")
    pipeline, target = prepare(args)
    lens = logit_lens(pipeline.model, read_inputs(args, pipeline, args.image)[0], target)
    rows = [(l, r, c, lens.label(c), p, z) for l, r, c, p, z in lens.top(args.top)]
    if lens.probabilities is None:  # a feature model: the similarity per layer
        rows = [(l, 1, "", lens.target_text, "", float(s)) for l, s in enumerate(lens.scores.tolist())]
    last = lens.num_layers - 1
    what = (f"p = {float(lens.target_probability[last]):.4f}" if lens.target_probability is not None
            else f"score {float(lens.scores[last]):.4f}")
    emit(args, HEADER, rows, f"vitviz lens: {lens.num_layers} layers; target {lens.target_text}: {what} after the "
                             f"last block")
    return 0
