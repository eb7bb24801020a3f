"""The ``vitviz`` command: the GUI by default, plus small headless sub-commands.

Usage::

    vitviz [IMAGE ...] [--model PATH_OR_NAME] [--device DEVICE]   open the GUI
    vitviz info CHECKPOINT [--num-heads N] [--preprocess imagenet|inception]
    vitviz predict CHECKPOINT IMAGE [IMAGE ...] [--top K] [--preprocess ...]
    vitviz models                                                   named pretrained weights and their cache state
    vitviz --version

Errors are printed as one line on stderr with exit status 2 (no traceback). This module never imports Qt; the GUI
is imported lazily.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from vitviz import __version__

SUBCOMMANDS = ("info", "predict", "models")


def _gui_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="vitviz",
        description="See what a Vision Transformer looks at. Without a sub-command, opens the GUI.",
        epilog="Sub-commands: 'vitviz info CHECKPOINT', 'vitviz predict CHECKPOINT IMAGE...', 'vitviz models'.",
    )
    p.add_argument("--version", action="version", version=f"vitviz {__version__}")
    p.add_argument("images", nargs="*", metavar="IMAGE", help="image files to open")
    p.add_argument("--model", "-m", metavar="PATH_OR_NAME",
                   help="checkpoint file/directory, or a pretrained name such as vit_b_16")
    p.add_argument("--device", metavar="DEVICE", help="torch device, e.g. cpu or cuda")
    return p


def _add_load_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--num-heads", type=int, help="attention heads, for checkpoints that do not say")
    p.add_argument("--num-classes", type=int, help="replace the head with one of this many classes")
    p.add_argument("--img-size", type=int, help="nominal input size (position embeddings are resampled)")
    p.add_argument("--preprocess", choices=("imagenet", "inception"),
                   help="normalisation: ImageNet mean/std, or Inception's mean = std = 0.5")


def _sub_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="vitviz")
    sub = p.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="describe a checkpoint: format, architecture, parameters, preprocessing")
    info.add_argument("checkpoint", help="checkpoint file or directory, or a pretrained name")
    _add_load_options(info)
    pred = sub.add_parser("predict", help="print the top classes for images")
    pred.add_argument("checkpoint", help="checkpoint file or directory, or a pretrained name")
    pred.add_argument("images", nargs="+", metavar="IMAGE")
    pred.add_argument("--top", type=int, default=5, help="how many classes to print (default 5)")
    pred.add_argument("--device", default="cpu")
    _add_load_options(pred)
    sub.add_parser("models", help="list named pretrained weights and whether they are cached")
    return p


def _load(args: argparse.Namespace):
    """A checkpoint path, or a pretrained name (only when no such file exists)."""
    from vitviz.model.pretrained import load_model

    return load_model(args.checkpoint, num_heads=args.num_heads, num_classes=args.num_classes,
                      img_size=args.img_size, preprocess=args.preprocess)


def _cmd_info(args: argparse.Namespace) -> int:
    from vitviz.model.pretrained import PRETRAINED, cache_path, is_cached

    name = args.checkpoint
    if not Path(name).exists() and name in PRETRAINED and not is_cached(name):  # describe without downloading
        info = PRETRAINED[name]
        p = info.preprocess
        print(f"name:          {name} ({info.weights}), not downloaded yet")
        print(f"description:   {info.description}")
        print(f"download:      {info.url} ({info.size_mb:.1f} MB) -> {cache_path(name)}")
        print(f"preprocessing: resize {p.resize} ({p.interpolation}), centre crop {p.crop[0]}x{p.crop[1]}, "
              f"mean {p.mean}, std {p.std}")
        labels = info.class_labels()
        print(f"classes:       {len(labels) if labels else 'unknown'}")
        print(f"parameters:    {info.num_params:,} ({info.num_params / 1e6:.1f} M)")
        return 0
    model = _load(args)
    n = model.num_params()
    print(model.spec.describe())
    print(f"parameters:    {n:,} ({n / 1e6:.1f} M)")
    return 0


def _cmd_predict(args: argparse.Namespace) -> int:
    import torch

    from vitviz.imaging import ImageError, load_image

    if args.top < 1:
        raise ValueError(f"--top {args.top}: must be at least 1")
    model = _load(args).to(args.device)
    spec = model.spec
    for path in args.images:
        # the one image reader of vitviz (the window uses it too): same pixels, same probabilities; bad files
        # are an ImageError naming the file
        image = load_image(path).image
        try:
            x = spec.preprocess(image)[None].to(args.device)
        except ImageError as e:
            raise ImageError(path, e.problem) from None
        with torch.inference_mode():
            logits = model(x)[0].float().cpu()
        if logits.ndim != 1 or logits.numel() == 0:
            raise ValueError(f"{spec.name}: the model has no classification head (num_classes=0)")
        probs = logits.softmax(-1)
        k = min(args.top, probs.numel())
        top = probs.topk(k)
        print(path)
        for p, i in zip(top.values.tolist(), top.indices.tolist()):
            print(f"  {i:>5d}  {p:6.3f}  {spec.label(i)}")
    return 0


def _pretrained_listing() -> list[tuple[str, float, str, Path]]:
    """``(name, size_mb, description, cache path)`` of every named pretrained model (no torch import)."""
    from vitviz import catalog

    return [(n, row[3], catalog.description(n), catalog.cache_file(n)) for n, row in catalog.TORCHVISION_VITS.items()]


def _cmd_models(args: argparse.Namespace) -> int:
    rows = _pretrained_listing()
    width = max(len(n) for n, *_ in rows)
    for name, size_mb, description, path in rows:
        state = "cached" if path.is_file() else "not cached"
        print(f"{name:<{width}s} {size_mb:8.1f} MB  {state:<10s}  {description}")
        print(f"{'':<{width}s} {path}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``vitviz`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in SUBCOMMANDS:
        args = _sub_parser().parse_args(argv)
        handler = {"info": _cmd_info, "predict": _cmd_predict, "models": _cmd_models}[args.command]
        try:
            return handler(args)
        except (ValueError, RuntimeError, OSError) as e:  # CheckpointError and PretrainedError included
            print(f"vitviz {args.command}: error: {e}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("vitviz: interrupted", file=sys.stderr)
            return 130
    args = _gui_parser().parse_args(argv)
    try:
        from vitviz.gui.app import run_gui
    except ImportError as e:
        print(f"vitviz: the GUI is not available ({e}). Headless commands still work: "
              f"'vitviz info CHECKPOINT', 'vitviz predict CHECKPOINT IMAGE'.", file=sys.stderr)
        return 1
    try:
        return int(run_gui(list(args.images), model=args.model, device=args.device) or 0)
    except ValueError as e:  # --model names nothing that exists (CheckpointError): said before any window opens
        print(f"vitviz: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
