"""``vitviz ablate MODEL IMAGE [--target T] [--mode zero|mean] [--csv F]``: head knock-out
(:func:`vitviz.capture.mechanistic.head_knockout`): the target's score with each (layer, head) removed; columns
``layer``, ``head``, ``score``, ``delta`` (score minus the clean score)."""

from __future__ import annotations

import argparse

from vitviz.cli.commands import summary
from vitviz.cli.mechanistic_flags import add_common, emit, prepare, read_inputs
from vitviz.cli.shared import Reporter

HEADER = ("layer", "head", "score", "delta")
MODES = ("zero", "mean")


def add_parser(sub) -> None:
    p = sub.add_parser("ablate", help=summary("ablate"),
                       description="Head knock-out: for every (layer, head), the target's score with that head's "
                                   "slice of the attention output (before the output projection) set to zero, or "
                                   "with --mode mean to its mean over the image's tokens.")
    p.add_argument("model", metavar="MODEL", help="checkpoint file or folder, a pretrained name, 'demo' or "
                                                  "random:ARCH")
    p.add_argument("image", metavar="IMAGE")
    p.add_argument("--mode", choices=MODES, default="zero", help="zero (default) or mean")
    add_common(p)


def run(args: argparse.Namespace, report: Reporter) -> int:
    from vitviz.capture.mechanistic import head_knockout

    pipeline, target = prepare(args)
    result = head_knockout(pipeline.model, read_inputs(args, pipeline, args.image)[0], target, mode=args.mode)
    L, H = result.scores.shape
    emit(args, HEADER, result.rows(), f"vitviz ablate: {L} layers x {H} heads, {args.mode}; target "
                                      f"{result.target_text}: clean score {result.clean:.4f}")
    return 0
