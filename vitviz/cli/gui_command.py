"""``vitviz [IMAGE ...] [--model M] [--device D]`` (no sub-command): the window, on images, a saved session or your
own model class (``--model FILE.py:CLASS``). Qt is imported only when the window opens."""

from __future__ import annotations

import argparse
import sys

from vitviz import __version__
from vitviz._util.display import display_problem
from vitviz.cli.commands import listing
from vitviz.cli.run_flags import add_run_flags
from vitviz.cli.shared import Parser, Reporter, add_debug


def gui_parser() -> argparse.ArgumentParser:
    p = Parser(
        prog="vitviz",
        description="See what a Vision Transformer looks at. Without a sub-command, opens the GUI.",
        epilog=listing(),
        formatter_class=argparse.RawDescriptionHelpFormatter,  # the listing keeps its lines
    )
    p.add_argument("--version", action="version", version=f"vitviz {__version__}")
    p.add_argument("images", nargs="*", metavar="IMAGE",
                   help="image files to open, or a saved session (.vitviz.json) to show again")
    p.add_argument("--model", "-m", metavar="PATH_OR_NAME",
                   help="checkpoint file/directory, or a model name: a curated one such as dino-s8 ('vitviz "
                        "models'), a timm name (timm/vit_small_patch14_reg4_dinov2.lvd142m, hf-hub:...), a Hugging "
                        "Face id (facebook/dinov2-small) or a torchvision name (vit_b_16); downloaded once; or "
                        "your own model class as path/to/file.py:ClassName: vitviz imports and runs that file (your "
                        "code, run because you asked) and builds ClassName(**--init)")
    p.add_argument("--weights", metavar="CKPT",
                   help="with --model FILE.py:CLASS: its state dict (.pth/.pt read with torch.load(weights_only=True), "
                        "or .safetensors); without it the weights are random")
    p.add_argument("--init", metavar="JSON",
                   help="with --model FILE.py:CLASS: the constructor's arguments as a JSON object (or list), or a "
                        ".json file, e.g. '{\"img_size\": 32, \"num_classes\": 10}'")
    add_run_flags(p, remembered=True)  # the window says what it runs on in its status bar
    add_debug(p)
    return p


def user_model(args: argparse.Namespace):
    """``(model, note)`` for ``--model FILE.py:CLASS`` (vitviz.pipeline.open_adapted), else None;
    ``--weights`` and ``--init`` without it are an error."""
    if not (args.model and ".py:" in args.model):
        if args.weights is not None or args.init is not None:
            raise ValueError("--weights and --init go with --model path/to/file.py:ClassName (your own model class)")
        return None
    from vitviz.pipeline import open_adapted  # torch: only for your own model class

    return open_adapted(args.model, weights=args.weights, init=args.init)


def launch(argv: list[str], debug: bool) -> int:
    """Parse ``argv`` (no sub-command) and open the window; returns the exit status (1: no GUI here; 2: an error
    before any window opened, on one line; 130: interrupted)."""
    args = gui_parser().parse_args(argv)
    problem = display_problem()  # before Qt starts: it would abort the process
    if problem is not None:
        print(f"vitviz: error: no window can open here: {problem}. Headless commands still work: 'vitviz export', "
              "'vitviz predict', 'vitviz info' ('vitviz --help')", file=sys.stderr)
        return 2
    try:
        from vitviz.gui.app import run_gui  # Qt: imported when the window opens
    except ImportError as e:
        print(f"vitviz: the GUI is not available ({e}). Headless commands still work: "
              f"'vitviz info CHECKPOINT', 'vitviz predict CHECKPOINT IMAGE'.", file=sys.stderr)
        return 1
    try:
        user = user_model(args)  # your own class: imported, built and checked before any window opens
        if user is not None:
            return int(run_gui(list(args.images), device=args.device, precision=args.precision, module=user[0],
                               note=user[1]) or 0)
        return int(run_gui(list(args.images), model=args.model, device=args.device, precision=args.precision) or 0)
    except KeyboardInterrupt:
        print("vitviz: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - --model names nothing that exists (CheckpointError): said before any
        return Reporter(None, debug)(e)  # window opens, on one line
