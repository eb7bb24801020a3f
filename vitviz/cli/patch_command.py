"""``vitviz patch MODEL CLEAN CORRUPT [--target T] [--csv F]``: activation patching
(:func:`vitviz.capture.mechanistic.activation_patching`): each block's output from the clean image into the corrupted
image's run, at [CLS], at all tokens and at each patch; columns ``layer``, ``position`` (``cls``, ``all`` or
``row,col``), ``recovered`` (the share of the clean target score recovered)."""

from __future__ import annotations

import argparse

from vitviz.cli.commands import summary
from vitviz.cli.mechanistic_flags import add_common, emit, prepare, read_inputs
from vitviz.cli.shared import Reporter

HEADER = ("layer", "position", "recovered")


def add_parser(sub) -> None:
    p = sub.add_parser("patch", help=summary("patch"),
                       description="Activation patching: block l's output from the CLEAN image's run put into the "
                                   "CORRUPT image's run at [CLS] (the first prefix token), at all tokens and at "
                                   "each patch; recovered = (patched - corrupt) / (clean - corrupt) of the target "
                                   "score (fixed on the clean image).")
    p.add_argument("model", metavar="MODEL", help="checkpoint file or folder, a pretrained name, 'demo' or "
                                                  "random:ARCH")
    p.add_argument("clean", metavar="CLEAN")
    p.add_argument("corrupt", metavar="CORRUPT")
    add_common(p)


def run(args: argparse.Namespace, report: Reporter) -> int:
    from vitviz.capture.mechanistic import activation_patching

    pipeline, target = prepare(args)
    clean, corrupt = read_inputs(args, pipeline, args.clean, args.corrupt)
    result = activation_patching(pipeline.model, clean, corrupt, target)
    emit(args, HEADER, result.rows(), f"vitviz patch: {result.num_layers} layers; target {result.target_text}: "
                                      f"clean {result.clean:.4f}, corrupt {result.corrupt:.4f}")
    return 0
