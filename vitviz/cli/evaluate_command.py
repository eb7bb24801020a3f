"""``vitviz evaluate CHECKPOINT IMAGE|FOLDER|GLOB ...``: faithfulness of the maps (deletion and insertion AUC per view
against random rankings, :func:`vitviz.evaluate.evaluate_views`) for each image, then the mean over the images;
bad images are one line each on stderr and skipped. A shard (``--shard K/N`` or a launcher's variables) writes its
images' tables beside the ``--csv`` file (``NAME-K-of-N.evaluate.json``: :mod:`vitviz.evaluate.table_parts`);
``vitviz merge`` joins them into the CSV of one run. With ground truth (``--masks``, or ``gtsegs_ijcv.mat`` as IMAGES)
each view's map also gets its localisation scores (:mod:`vitviz.evaluate.localisation`); ``--only localisation``
skips the curves."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from tqdm import tqdm

from vitviz import views as view_registry
from vitviz.batch.failures import error_text
from vitviz.batch.inputs import inputs_for_cli, take_shard
from vitviz.batch.parts import plan_shard
from vitviz.batch.target_flags import read_prompts, read_target, text_problem
from vitviz.cli.batch_flags import (
    BACKWARD,
    add_backward_argument,
    add_shard_argument,
    announce,
    join_signed,
    shard_and_device,
)
from vitviz.cli.commands import summary
from vitviz.cli.localisation_flags import ground_truth_plan
from vitviz.cli.run_flags import add_run_flags, resolve_run_flags
from vitviz.cli.shared import Reporter, add_debug, add_load_options, add_text_options, check_templates, load
from vitviz.evaluate.protocol import BASELINES, DEFAULT_VIEWS
from vitviz.evaluate.report import check_writable, format_mean_table, write_csv
from vitviz.evaluate.table_parts import TablePart, part_path, write_part
from vitviz.views.presets import PRESETS

BY_SIZE = "by the model's size"
LOCALISE_BATCH = 16
"""Images per streamed pass of ``--only localisation`` when ``--batch-size`` is not given."""


def prepare_argv(argv: Sequence[str]) -> list[str]:
    """``--shard -1/2`` reaches its check (see :func:`vitviz.cli.batch_flags.join_signed`)."""
    return join_signed(argv, ("--shard", "--steps", "--seeds", "--target", "--batch-size"))


def add_parser(sub) -> None:
    ev = sub.add_parser(
        "evaluate", help=summary("evaluate"),
        description="For each image: the deletion and insertion perturbation curves of each view's map (patches "
                    "ranked by the map, replaced by the baseline a whole patch at a time; the probability of the "
                    "target class after each step, or the similarity of a similar: target) and of random rankings; "
                    "prints the areas under the curves (deletion: lower is better; insertion: higher is better), "
                    "then their mean over the images. A "
                    "shard (--shard K/N, or torchrun's or SLURM's variables) writes its tables beside the --csv file "
                    "(NAME-K-of-N.evaluate.json); 'vitviz merge DIR' joins them into the CSV of one run.")
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
    ev.add_argument("--target", default="top",
                    help="what to explain and score: 'top' (each image's top class, default), a class index or name "
                         "(its probability is read), similar:IMAGE, similar:IMAGE@ROW,COL or similar:VECTOR.npy (the "
                         "cosine similarity of the pooled embedding to the reference is read: a feature model's "
                         "curves follow it), or gt: the class of the ground-truth mask (its largest class)")
    add_text_options(ev, "the faithfulness of the maps of each prompt, the curves following that prompt's "
                         "zero-shot probability (CLIP: softmax over the prompts; SigLIP: sigmoid) (not with --target)")
    ev.add_argument("--masks", metavar="M",
                    help="localisation against ground truth: a folder of masks named like the images (same path "
                         "below the folder, any image format; 0 = background, other values = object; palette PNGs "
                         "(PASCAL VOC): the index is the class; RGB PNGs (ImageNet-S): class = R + 256 G, 1000 "
                         "ignored), a folder of VOC .xml boxes, a COCO .json (boxes), or an OpenImagesV7 "
                         "point-label .csv (with --classes; a prompt per label on a CLIP/SigLIP model). "
                         "gtsegs_ijcv.mat given as IMAGE brings its own masks (images gtsegs_ijcv.mat/0001 ...)")
    ev.add_argument("--ignore-value", type=int, metavar="V",
                    help="with --masks: the mask value that is ignored (PASCAL VOC: 255)")
    ev.add_argument("--classes", metavar="CSV",
                    help="with an OpenImages --masks .csv: the class descriptions (LabelName,DisplayName)")
    ev.add_argument("--only", choices=("localisation", "faithfulness"),
                    help="localisation: no perturbation curves (needs ground truth); faithfulness: no localisation")
    ev.add_argument("--pointing-tolerance", type=float, default=0.0, metavar="PX",
                    help="the pointing game's tolerance in pixels of the model's input (default 0: the maximum must "
                         "lie on the object; Zhang et al.'s protocol: 15)")
    ev.add_argument("--csv", metavar="FILE", help="also write the AUCs as CSV (never replaces a file unless "
                                                  "--overwrite)")
    ev.add_argument("--overwrite", action="store_true", help="replace an existing --csv file")
    add_run_flags(ev, batch_size=None, batch_help=f"perturbed images per forward (default: {BY_SIZE}); with --only "
                                                  f"localisation: images per pass (default {LOCALISE_BATCH})")
    add_backward_argument(ev)
    add_shard_argument(ev)
    add_load_options(ev)
    add_debug(ev)


def run(args: argparse.Namespace, report: Reporter) -> int:
    """The faithfulness table of each image (progress bar on stderr), then the mean over the images; bad images are
    one line each on stderr and skipped."""
    from vitviz.batch.fingerprint import model_sha256  # torch: when the command runs, not for its --help
    from vitviz.capture.model_head import is_feature_model
    from vitviz.evaluate.run import evaluate_views, localise_images
    from vitviz.pipeline import Pipeline

    shard, device, origin, line = shard_and_device(args.shard, args.device, "evaluate")
    sharded = shard[1] > 1
    if sharded and not args.csv:
        raise ValueError(f"--csv: shard {shard[0]}/{shard[1]} (from {origin}) writes its tables beside the CSV file "
                         "of the whole evaluation; give --csv FILE ('vitviz merge' then joins the shards into it)")
    gt_plan = ground_truth_plan(args)  # flags and ground truth checked before the model is loaded
    names = [n for v in (args.views or DEFAULT_VIEWS) for n in v.split(",") if n.strip()]
    names = [n.strip() for n in names]
    valid = list(PRESETS) + [v.key for v in view_registry.all_views()]
    unknown = [n for n in names if n not in valid]
    if unknown or not names:
        raise ValueError(f"--views {' '.join(unknown) or '(none)'}: unknown view; valid: {', '.join(valid)}")
    for opt, v in (("--steps", args.steps), ("--seeds", args.seeds)):
        if v < 1:
            raise ValueError(f"{opt} {v}: must be at least 1")
    if gt_plan.prompts is None:  # (point labels take --templates for their prompts)
        check_templates(args)
    prompts = gt_plan.prompts
    if args.text is not None:  # before the model is loaded: --target too, empty prompts, no text tower
        prompts, problem = text_problem(args.text, args.checkpoint, args.target)
        if problem:
            raise ValueError(problem)
    run_flags = resolve_run_flags(args, "evaluate", device=device)
    part = part_path(args.csv, shard) if sharded else None
    if args.csv:
        check_writable(part or args.csv, overwrite=args.overwrite)  # before minutes of work, not after
    images, status = gt_plan.images, 0
    if gt_plan.rest:
        more, status = inputs_for_cli(gt_plan.rest, report)
        images += more
    if not images:
        return 2
    announce(line)  # the first line, once the arguments are checked: which shard, from which launcher
    plan = plan_shard("evaluate", images, shard, origin) if sharded else None
    shard_images = take_shard(images, *shard)
    paths = [im.path for im in shard_images]
    rels = {im.path: im.rel for im in shard_images}
    model = load(args, args.checkpoint)
    pipe = Pipeline(model, device=run_flags.device, precision=run_flags.precision_choice)
    if prompts is not None:  # each prompt a class of the zero-shot model, its probability read by the curves
        pipe.source = args.checkpoint
        pipe = read_prompts(pipe, prompts, args.templates)
        model = pipe.model
    targets = list(range(len(prompts))) if prompts is not None else [
        None if gt_plan.target_gt else read_target(pipe, args.target)]
    if targets == [None] and not gt_plan.target_gt and gt_plan.curves and is_feature_model(model):
        # (read_target: ValueError naming --target, before any image)
        raise ValueError(f"{model.spec.name}: the model has no classifier, so there is no class probability to "
                         "perturb: give --target similar:IMAGE, similar:IMAGE@ROW,COL or similar:VECTOR.npy (the "
                         "curves then read the similarity)")
    work = (f"{len(paths)} image{'s' * (len(paths) != 1)} · {len(targets)} target{'s' * (len(targets) != 1)} each "
            f"· views {', '.join(names)}")
    if gt_plan.curves:
        work += f" · {args.steps} steps, {args.seeds} random rankings, {args.baseline} baseline"
    run_flags.announce(model.spec.name, lead=work, batch_words=BY_SIZE)  # the first line: what was resolved
    tables = []
    failures: list[tuple[str, str]] = []
    bar = tqdm(total=len(paths), desc="evaluate", unit="image", file=sys.stderr, disable=None, leave=False,
               bar_format="{desc}: {percentage:3.0f}%|{bar}| {n:.1f}/{total} images [{elapsed}<{remaining}]")
    def fail(e: Exception, path: str) -> None:
        nonlocal status
        bar.clear()
        status = report(e, path)
        failures.append((path, error_text(e, path)))

    def emit(path: str, done: list) -> None:
        for table in done:
            table.source = path
            tables.append(table)
            tqdm.write(("\n" if len(tables) > 1 else "") + table.format(), file=sys.stdout)
        sys.stdout.flush()

    def localise(ready: list) -> list:
        flat = [(path, loaded, job) for _, path, loaded, jobs in ready for job in jobs]
        return localise_images(pipe, [f[1] for f in flat], names, [f[2][1] for f in flat],
                               targets=[f[2][0] for f in flat], object_classes=[f[2][2] for f in flat],
                               sources=[f[0] for f in flat], tolerance=args.pointing_tolerance,
                               keep_graph=BACKWARD[args.backward])

    # the curves: one image at a time; localisation alone: a streamed pass over a batch of images
    chunk = 1 if gt_plan.curves else (args.batch_size or LOCALISE_BATCH)
    try:
        for start in range(0, len(paths), chunk):
            ready = []
            for i, path in enumerate(paths[start:start + chunk], start):
                try:
                    loaded = gt_plan.load(path)
                    ready.append((i, path, loaded, gt_plan.jobs(path, rels[path], loaded.size, targets, prompts)))
                except Exception as e:  # noqa: BLE001 - reported on one line, the next image still evaluated
                    fail(e, path)
            if not gt_plan.curves:
                try:
                    done = localise(ready)
                    groups = [(path, [done.pop(0) for _ in jobs]) for _, path, _, jobs in ready]
                except Exception:  # noqa: BLE001 - one image at a time, so that only the bad one fails
                    groups = []
                    for item in ready:
                        try:
                            groups.append((item[1], localise([item])))
                        except Exception as e:  # noqa: BLE001 - reported on one line
                            fail(e, item[1])
                for path, done in groups:
                    emit(path, done)
                bar.n = min(start + chunk, len(paths))
                bar.refresh()
                continue
            for i, path, loaded, jobs in ready:
                def progress(done: int, total: int, i: int = i, k: int = 0, n_jobs: int = len(jobs)) -> None:
                    bar.n = i + (k + done / max(total, 1)) / n_jobs
                    bar.refresh()

                try:
                    done = [evaluate_views(pipe, loaded, names, steps=args.steps, baseline=args.baseline,
                                           target=target, seeds=args.seeds, batch_size=args.batch_size,
                                           keep_graph=BACKWARD[args.backward], ground_truth=gt, object_class=cls,
                                           tolerance=args.pointing_tolerance,
                                           progress=lambda d, n, k=k, i=i: progress(d, n, i, k))
                            for k, (target, gt, cls) in enumerate(jobs)]
                except Exception as e:  # noqa: BLE001 - reported on one line, the next image still evaluated
                    fail(e, path)
                    continue
                finally:
                    bar.n = i + 1
                    bar.refresh()
                emit(path, done)
    finally:
        bar.close()
    per_prompt = prompts is not None and gt_plan.prompts is None  # (point labels: one mean over every label)
    for k, prompt in enumerate(prompts if per_prompt else []):  # the mean over the images of each prompt
        group = [t for t in tables if t.target == k]
        if len(group) > 1:
            print(f"\nprompt {prompt!r}: " + format_mean_table(group), flush=True)
    if not per_prompt and len(tables) > 1:
        print("\n" + format_mean_table(tables), flush=True)
    if part is not None and plan is not None:  # a shard: its tables, for vitviz merge
        settings = {"model_sha256": model_sha256(model), "model": args.checkpoint, "views": names,
                    "steps": args.steps, "baseline": args.baseline, "seeds": args.seeds, "target": args.target,
                    **gt_plan.settings()}
        if prompts is not None:
            settings.update(text=prompts, templates=args.templates)
        written = write_part(part, TablePart(plan.to_json(), Path(args.csv).name, tables, failures, settings),
                             overwrite=args.overwrite)
        print(f"wrote {written} (shard {shard[0]}/{shard[1]}: 'vitviz merge {written.parent}' joins the shards)",
              file=sys.stderr, flush=True)
    elif args.csv and tables:
        written = write_csv(args.csv, tables, overwrite=args.overwrite)
        print(f"wrote {written}", file=sys.stderr, flush=True)
    return status
