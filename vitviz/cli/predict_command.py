"""``vitviz predict CHECKPOINT IMAGE ...``: the top classes of each image, or with ``--text "a cat; a dog"`` the
zero-shot probabilities over the prompts (CLIP: softmax over the prompts; SigLIP: the sigmoid of each); an image that
cannot be read is one line on stderr and the next one follows."""

from __future__ import annotations

import argparse
import sys

from vitviz.batch.target_flags import read_prompts, text_problem
from vitviz.cli.commands import summary
from vitviz.cli.run_flags import add_run_flags, resolve_run_flags
from vitviz.cli.shared import Reporter, add_debug, add_load_options, add_text_options, check_templates, load
from vitviz.imaging import ImageError, load_image

FAMILIES = {"clip": ("CLIP", "p = softmax over the prompts of logit_scale * cos(image, text)"),
            "siglip": ("SigLIP", "p = sigmoid(logit_scale * cos(image, text) + logit_bias), each prompt on its own")}


def add_parser(sub) -> None:
    pred = sub.add_parser("predict", help=summary("predict"))
    pred.add_argument("checkpoint", help="checkpoint file or directory, or a pretrained name")
    pred.add_argument("images", nargs="+", metavar="IMAGE")
    pred.add_argument("--top", type=int, default=None,
                      help="how many classes to print (default 5; with --text: every prompt)")
    add_run_flags(pred)
    add_text_options(pred, "print each image's zero-shot probabilities over the prompts (CLIP: softmax; SigLIP: "
                           "sigmoid) and scores")
    add_load_options(pred)
    add_debug(pred)


def run(args: argparse.Namespace, report: Reporter) -> int:
    """The top classes (or prompts) of each image; an image that cannot be read is one line on stderr and the next
    one follows."""
    import torch  # when the command runs, not for its --help

    from vitviz.pipeline import DTYPES, Pipeline

    if args.top is not None and args.top < 1:
        raise ValueError(f"--top {args.top}: must be at least 1")
    check_templates(args)
    prompts = None
    if args.text is not None:  # before the model is loaded: empty prompts, no text tower
        prompts, problem = text_problem(args.text, args.checkpoint)
        if problem:
            raise ValueError(problem)
    run_flags = resolve_run_flags(args, "predict")
    pipeline = Pipeline(load(args, args.checkpoint), device=run_flags.device, precision=run_flags.precision_choice)
    rule_line = None
    if prompts is not None:
        pipeline.source = args.checkpoint  # where the text tower is
        prompted = read_prompts(pipeline, prompts, args.templates)
        family, rule = FAMILIES.get(prompted.text_tower().family, FAMILIES["clip"])
        templates = f", templates: {args.templates}" if args.templates else ""
        rule_line = f"{family} zero-shot over {len(prompts)} prompt(s){templates}: {rule}"
        pipeline = prompted
    model = pipeline.model
    spec = model.spec
    if not spec.config.num_classes:
        from vitviz.model.text import text_tower_reason

        hint = "" if text_tower_reason(args.checkpoint) else \
            "; it has a text tower: --text 'a cat; a dog' prints zero-shot probabilities over prompts"
        raise ValueError(f"{spec.name}: the model has no classification head (num_classes=0){hint}")
    top = args.top if args.top is not None else (len(prompts) if prompts is not None else 5)
    status, shown = 0, False
    for path in args.images:
        try:
            # the one image reader of vitviz (the window uses it too): same pixels, same probabilities; bad files
            # are an ImageError naming the file
            image = load_image(path).image
            try:
                x = spec.preprocess(image)[None].to(run_flags.device, DTYPES[run_flags.precision])
            except ImageError as e:
                raise ImageError(path, e.problem) from None
            with torch.inference_mode():
                logits = model(x)[0].float().cpu()
            bad = int((~torch.isfinite(logits)).sum())
            if bad:  # a NaN or inf weight (or an overflow in this precision) reaches the output: no numbers printed
                raise ValueError(f"{path}: the model's output has {bad} non-finite value(s) of {logits.numel()} "
                                 f"(NaN or inf in its weights, or an overflow in {run_flags.precision})")
        except Exception as e:  # noqa: BLE001 - reported on one line, the next image still predicted
            status = report(e, path)
            continue
        if not shown:  # the first line (stderr) and the rule, before the first prediction (a run whose every image
            run_flags.announce(spec.name)  # is refused prints only the refusals, one line each)
            if rule_line:
                print(rule_line)
            shown = True
        probs = logits.sigmoid() if getattr(spec, "probability", "softmax") == "sigmoid" else logits.softmax(-1)
        best = probs.topk(min(top, probs.numel()))
        print(path)
        if prompts is not None:  # the columns named (the score is the family's logit: scale * cos (+ bias))
            print(f"  {'index':>5}  {'p':>6}  {'logit':>9}  prompt")
        for p, i in zip(best.values.tolist(), best.indices.tolist()):
            if prompts is not None:  # the probability to 4 places and the family's score (its logit)
                print(f"  {i:>5d}  {p:6.4f}  {float(logits[i]):9.4f}  {spec.label(i)}")
            else:
                print(f"  {i:>5d}  {p:6.3f}  {spec.label(i)}")
        sys.stdout.flush()
    return status
