"""``vitviz export --model M INPUT ... --out DIR``: the window's maps (PNG and/or npy) of many images, with a
manifest; resumable, sharded (:mod:`vitviz.batch.export`). Its flags map one to one onto
:class:`~vitviz.batch.export_options.ExportOptions`."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace

from vitviz import views as registry
from vitviz._util.files import output_folder_problem
from vitviz.batch.export import Exporter
from vitviz.batch.export_options import DEFAULT_VIEWS, FORMATS, HEAD_WORDS, PROMPT_VIEWS, ExportOptions, is_int
from vitviz.batch.inputs import inputs_for_cli, parse_shard
from vitviz.batch.target_flags import text_problem
from vitviz.cli.batch_flags import (
    BACKWARD,
    add_backward_argument,
    add_batch_arguments,
    add_shard_argument,
    announce,
    check_workers,
    join_signed,
    shard_and_device,
)
from vitviz.cli.commands import summary
from vitviz.cli.run_flags import resolve_run_flags
from vitviz.cli.shared import Reporter, add_debug, add_load_options, add_text_options, check_templates, load
from vitviz.imaging import ExportError
from vitviz.model.sources.refs import parse_model_ref
from vitviz.render.figures import mp4_problem, parse_scale
from vitviz.views.options import cli_flags

# flags whose value may start with a minus sign (a negative index, a mistyped shard): argparse would take
# "--shard -1/2" for two flags and say "expected one argument" instead of what is wrong with -1/2
SIGNED_VALUES = ("--shard", "--query", "--layers", "--heads", "--target", "--scale", "--fps", "--batch-size")


def prepare_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` with a value that starts with a minus sign and a digit joined to its flag (``--shard -1/2`` ->
    ``--shard=-1/2``), so that the value reaches its check and the message names the flag and the cause."""
    return join_signed(argv, SIGNED_VALUES)


def add_parser(sub) -> None:
    exp = sub.add_parser(
        "export", help=summary("export"),
        description="For every image: the requested views' maps, as the window exports them (PNG) and/or raw at "
                    "patch resolution (npy), and one line of manifest.jsonl (predictions, target, files, timings, "
                    "errors). A rerun skips the images already done; --shard K/N (or torchrun's or SLURM's variables) "
                    "splits the work: each shard writes manifest-K-of-N.jsonl, 'vitviz merge DIR' joins them. "
                    "Exit status: 0, 2 (could not run), 64 + n (n images failed), 130 (interrupted).")
    add_arguments(exp)
    add_load_options(exp)
    add_debug(exp)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of ``vitviz export`` (the model's load options and ``--debug`` are added by :func:`add_parser`)."""
    add_batch_arguments(p, "output folder (created if missing)",
                        overwrite_help="redo every image, also those done, and replace existing files")
    p.add_argument("--views", action="append", metavar="V[,V...]",
                   help=f"views, comma-separated or the flag repeated (default: {','.join(DEFAULT_VIEWS)})")
    p.add_argument("--layers", action="append", metavar="L[,L...]",
                   help="layers of the views that have one: indices (negative from the end), 'last' (default), "
                        "'all', 'emb' (token views: the embeddings)")
    p.add_argument("--heads", action="append", metavar="H[,H...]",
                   help="heads of the views that have one: mean (default), max, min, indices or 'all'")
    p.add_argument("--query", metavar="ROW,COL",
                   help="query patch of the query / token-similarity / position-embedding views (default: centre)")
    p.add_argument("--target", default="top",
                   help="what the gradient views explain: 'top' (each image's top class, default), a class index or "
                        "name (or a unique part of one), similar:IMAGE (the cosine similarity of each image's pooled "
                        "embedding to IMAGE's), similar:IMAGE@ROW,COL (to that patch's token of IMAGE) or "
                        "similar:VECTOR.npy (to a stored vector); a feature model (DINO, CLIP) needs a similar: target")
    add_text_options(p, "one map per prompt of each gradient view (default view: legrad), the prompt named in the "
                        "file names, captions and manifest (not with --target)")
    p.add_argument("--format", choices=FORMATS, default="png",
                   help="png: the overlay as the window exports it; npy: the raw map at patch resolution (float32 "
                        "[gh, gw]; feature_pca: its R, G, B in [0, 1], [gh, gw, 3]); "
                        "both")
    p.add_argument("--scale", default="native",
                   help="PNG size: native (the image's pixels, default), print (long side >= 2048 px, the "
                        "window's default) or a factor 1-16")
    for f in cli_flags():  # the display options of the option table that have a flag: --cmap, --no-colorbar ...
        p.add_argument(f.flag, **f.add_argument_kwargs())
    add_shard_argument(p)
    add_backward_argument(p)
    p.add_argument("--animate", choices=("gif", "apng", "mp4"),
                   help="also write each view that has a layer (or start layer) over every layer as one animation, "
                        "the layer drawn on each frame, one colour scale across layers (mp4 needs imageio-ffmpeg)")
    p.add_argument("--fps", type=float, default=2.0, help="frames per second of --animate (default 2)")


def words(values: Sequence[str] | None) -> list[str]:
    """The words of a repeatable, comma-separated flag (``--views a,b --views c`` -> ``[a, b, c]``)."""
    return [w.strip() for v in (values or []) for w in str(v).split(",") if w.strip()]


def options_from_args(args: argparse.Namespace) -> ExportOptions:
    """:class:`ExportOptions` from parsed flags, checked (ValueError naming the flag and the problem)."""
    prompts: tuple[str, ...] = ()
    if getattr(args, "text", None) is not None:  # before the model is loaded: --target too, empty prompts, no tower
        found, problem = text_problem(args.text, args.model, args.target)
        if problem:
            raise ValueError(problem)
        prompts = tuple(found)
    check_templates(args)
    names = words(args.views) or list(PROMPT_VIEWS if prompts else DEFAULT_VIEWS)
    valid = [v.key for v in registry.all_views()]
    unknown = [n for n in names if n not in valid]
    if unknown:
        raise ValueError(f"--views {' '.join(unknown)}: unknown view; valid: {', '.join(valid)}")
    layers = words(args.layers) or ["last"]
    for w in layers:
        if w not in ("all", "last", "emb") and not is_int(w):
            raise ValueError(f"--layers {w}: expected a layer index, 'last', 'all' or 'emb'")
    heads = words(args.heads) or ["mean"]
    for w in heads:
        if w not in HEAD_WORDS + ("all",) and not (is_int(w) and int(w) >= 0):
            raise ValueError(f"--heads {w}: expected a head index (0, 1 ...), mean, max, min or all")
    query = None
    if args.query:
        parts = str(args.query).replace(" ", "").split(",")
        if len(parts) != 2 or not all(is_int(x) and int(x) >= 0 for x in parts):
            raise ValueError(f"--query {args.query}: expected ROW,COL of a patch, e.g. 7,7")
        query = (int(parts[0]), int(parts[1]))
    try:
        scale = str(parse_scale(args.scale))
    except ValueError as e:
        raise ValueError(f"--scale {args.scale}: {e}") from None
    display = tuple((f.option, f.value(getattr(args, f.option))) for f in cli_flags())  # ValueError naming the flag
    shard = parse_shard(args.shard) if args.shard else (1, 1)
    animate = getattr(args, "animate", None)
    fps = float(getattr(args, "fps", 2.0))
    if not 0 < fps <= 60:
        raise ValueError(f"--fps {fps:g}: must be more than 0 and at most 60")
    if animate == "mp4" and mp4_problem():
        raise ValueError(f"--animate mp4: {mp4_problem()}")
    if animate and not any(registry.get(n).slider for n in names):
        raise ValueError(f"--animate: none of the views ({', '.join(names)}) changes with the layer")
    return ExportOptions(views=tuple(dict.fromkeys(names)), layers=tuple(layers), heads=tuple(heads), query=query,
                         target=str(args.target).strip(), format=args.format, scale=scale, display=display,
                         batch_size=args.batch_size, device=args.device,
                         precision=args.precision, shard=shard, overwrite=args.overwrite, quiet=args.quiet,
                         animate=animate, fps=fps, text=prompts, templates=getattr(args, "templates", None))


def run(args: argparse.Namespace, report: Reporter) -> int:
    """Checks every flag, loads the model, exports; returns the exit status (0; 2: the command could not run;
    64 + n: n images failed; 130: interrupted)."""
    from vitviz.pipeline import Pipeline  # torch: when the command runs, not for its --help

    shard, device, origin, line = shard_and_device(args.shard, args.device, "export")
    options = replace(options_from_args(args), shard=shard)
    run_flags = resolve_run_flags(args, "export", device=device)
    device = run_flags.device
    workers = check_workers(args.workers)
    options = replace(options, device=device)
    problem = output_folder_problem(args.out)  # (the export checks it again, with the folder's manifests)
    if problem:
        raise ExportError(args.out, problem)
    images, status = inputs_for_cli(args.inputs, report)
    if not images:
        return 2
    announce(line)  # the first line, once the arguments are checked: which shard, from which launcher
    ref = parse_model_ref(args.model)
    model = load(args, args.model)
    pipeline = Pipeline(model, device=device, precision=options.precision)
    pipeline.source = args.model  # where a text tower is (--text)
    summary = Exporter(pipeline, options, args.out, model_ref=ref, origin=origin, workers=workers,
                       keep_graph=BACKWARD[args.backward]).run(images)
    return summary.exit_status or status
