"""``vitviz evaluate CHECKPOINT IMAGE|FOLDER|GLOB ...``: faithfulness of the maps (deletion and insertion AUC per view
against random rankings, :func:`vitviz.evaluate.evaluate_views`) for each image, then the mean over the images;
bad images are one line each on stderr and skipped."""

from __future__ import annotations

import argparse
import sys

from tqdm import tqdm

from vitviz import views as view_registry
from vitviz.batch.inputs import inputs_for_cli
from vitviz.cli.commands import summary
from vitviz.cli.shared import Reporter, add_debug, add_load_options, load
from vitviz.evaluate.protocol import BASELINES, DEFAULT_VIEWS
from vitviz.evaluate.report import check_writable, format_mean_table, write_csv
from vitviz.imaging import load_image
from vitviz.views.presets import PRESETS


def add_parser(sub) -> None:
    ev = sub.add_parser(
        "evaluate", help=summary("evaluate"),
        description="For each image: the deletion and insertion perturbation curves of each view's map (patches "
                    "ranked by the map, replaced by the baseline a whole patch at a time; the probability of the "
                    "target class after each step) and of random rankings; prints the areas under the curves "
                    "(deletion: lower is better; insertion: higher is better), then their mean over the images.")
    ev.add_argument("checkpoint", help="checkpoint file or directory, or a pretrained name")
    ev.add_argument("images", nargs="+", metavar="IMAGE",
                    help="image files, folders (searched recursively for images) or glob patterns ('**' recurses)")
    ev.add_argument("--views", nargs="+", default=None, metavar="VIEW",
                    help=f"views to evaluate, space- or comma-separated (default: {' '.join(DEFAULT_VIEWS)}; "
                         "cls_last = [CLS] attention of the last layer, mean of heads)")
    ev.add_argument("--steps", type=int, default=20, help="steps per curve (default 20)")
    ev.add_argument("--baseline", choices=BASELINES, default="mean",
                    help="what replaces a patch: the normalisation mean (default), the image blurred with a "
                         "Gaussian of sigma = one patch, or seeded noise")
    ev.add_argument("--seeds", type=int, default=10, help="random rankings of the random baseline (default 10)")
    ev.add_argument("--target", type=int, help="class to explain and score (default: each image's top class)")
    ev.add_argument("--csv", metavar="FILE", help="also write the AUCs as CSV (never replaces a file unless "
                                                  "--overwrite)")
    ev.add_argument("--overwrite", action="store_true", help="replace an existing --csv file")
    ev.add_argument("--batch-size", type=int, help="perturbed images per forward (default: by the model's size)")
    ev.add_argument("--device", default="cpu")
    add_load_options(ev)
    add_debug(ev)


def run(args: argparse.Namespace, report: Reporter) -> int:
    """The faithfulness table of each image (progress bar on stderr), then the mean over the images; bad images are
    one line each on stderr and skipped."""
    from vitviz.evaluate.run import evaluate_views  # torch: when the command runs, not for its --help
    from vitviz.pipeline import Pipeline

    names = [n for v in (args.views or DEFAULT_VIEWS) for n in v.split(",") if n.strip()]
    names = [n.strip() for n in names]
    valid = list(PRESETS) + [v.key for v in view_registry.all_views()]
    unknown = [n for n in names if n not in valid]
    if unknown or not names:
        raise ValueError(f"--views {' '.join(unknown) or '(none)'}: unknown view; valid: {', '.join(valid)}")
    for opt, v in (("--steps", args.steps), ("--seeds", args.seeds), ("--batch-size", args.batch_size)):
        if v is not None and v < 1:
            raise ValueError(f"{opt} {v}: must be at least 1")
    if args.csv:
        check_writable(args.csv, overwrite=args.overwrite)  # before minutes of work, not after
    images, status = inputs_for_cli(args.images, report)
    paths = [im.path for im in images]
    if not paths:
        return 2
    model = load(args, args.checkpoint)
    spec = model.spec
    k = int(spec.config.num_classes or 0)
    if not k:
        raise ValueError(f"{spec.name}: the model has no classification head (num_classes=0): there is no class "
                         "probability to perturb")
    if args.target is not None and not 0 <= args.target < k:
        raise ValueError(f"--target {args.target}: out of range for a model with {k} classes (valid: 0..{k - 1})")
    pipe = Pipeline(model, device=args.device)
    tables = []
    bar = tqdm(total=len(paths), desc="evaluate", unit="image", file=sys.stderr, disable=None, leave=False,
               bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total} images [{elapsed}<{remaining}]")
    try:
        for i, path in enumerate(paths):
            def progress(done: int, total: int, i: int = i) -> None:
                bar.n = i + done / max(total, 1)
                bar.refresh()

            try:
                loaded = load_image(path)
                table = evaluate_views(pipe, loaded, names, steps=args.steps, baseline=args.baseline,
                                       target=args.target, seeds=args.seeds, batch_size=args.batch_size,
                                       progress=progress)
            except Exception as e:  # noqa: BLE001 - reported on one line, the next image still evaluated
                bar.clear()
                status = report(e, path)
                continue
            finally:
                bar.n = i + 1
                bar.refresh()
            table.source = path
            tables.append(table)
            tqdm.write(("\n" if len(tables) > 1 else "") + table.format(), file=sys.stdout)
            sys.stdout.flush()
    finally:
        bar.close()
    if len(tables) > 1:
        print("\n" + format_mean_table(tables), flush=True)
    if args.csv and tables:
        written = write_csv(args.csv, tables, overwrite=args.overwrite)
        print(f"wrote {written}", file=sys.stderr, flush=True)
    return status
