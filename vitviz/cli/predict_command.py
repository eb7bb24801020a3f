"""``vitviz predict CHECKPOINT IMAGE ...``: the top classes of each image; an image that cannot be read is one line
on stderr and the next one follows."""

from __future__ import annotations

import argparse
import sys

from vitviz.cli.commands import summary
from vitviz.cli.shared import Reporter, add_debug, add_load_options, load
from vitviz.imaging import ImageError, load_image


def add_parser(sub) -> None:
    pred = sub.add_parser("predict", help=summary("predict"))
    pred.add_argument("checkpoint", help="checkpoint file or directory, or a pretrained name")
    pred.add_argument("images", nargs="+", metavar="IMAGE")
    pred.add_argument("--top", type=int, default=5, help="how many classes to print (default 5)")
    pred.add_argument("--device", default="cpu")
    add_load_options(pred)
    add_debug(pred)


def run(args: argparse.Namespace, report: Reporter) -> int:
    """The top classes of each image; an image that cannot be read is one line on stderr and the next one follows."""
    import torch  # when the command runs, not for its --help

    if args.top < 1:
        raise ValueError(f"--top {args.top}: must be at least 1")
    model = load(args, args.checkpoint).to(args.device)
    spec = model.spec
    if not spec.config.num_classes:
        raise ValueError(f"{spec.name}: the model has no classification head (num_classes=0)")
    status = 0
    for path in args.images:
        try:
            # the one image reader of vitviz (the window uses it too): same pixels, same probabilities; bad files
            # are an ImageError naming the file
            image = load_image(path).image
            try:
                x = spec.preprocess(image)[None].to(args.device)
            except ImageError as e:
                raise ImageError(path, e.problem) from None
            with torch.inference_mode():
                logits = model(x)[0].float().cpu()
        except Exception as e:  # noqa: BLE001 - reported on one line, the next image still predicted
            status = report(e, path)
            continue
        probs = logits.softmax(-1)
        k = min(args.top, probs.numel())
        top = probs.topk(k)
        print(path)
        for p, i in zip(top.values.tolist(), top.indices.tolist()):
            print(f"  {i:>5d}  {p:6.3f}  {spec.label(i)}")
        sys.stdout.flush()
    return status
