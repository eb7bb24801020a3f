"""The ``vitviz`` command: the GUI by default, plus small headless sub-commands.

Usage::

    vitviz [IMAGE ...] [--model PATH_OR_NAME] [--device DEVICE]   open the GUI
    vitviz SESSION.vitviz.json                                      the GUI showing a saved session (vitviz.document.state)
    vitviz [IMAGE ...] --model FILE.py:CLASS [--weights CKPT] [--init JSON]
                                                                    the GUI on your own model class (runs FILE.py)
    vitviz info CHECKPOINT [CHECKPOINT ...] [--num-heads N] [--preprocess imagenet|inception]
    vitviz predict CHECKPOINT IMAGE [IMAGE ...] [--top K] [--preprocess ...]
    vitviz models                                                   named models (curated Hub list, torchvision)
                                                                    and whether they are cached
    vitviz evaluate CHECKPOINT IMAGE|FOLDER|GLOB ... [--views V ...] [--steps N] [--baseline mean|blur|noise]
                    [--csv FILE [--overwrite]]                      faithfulness: deletion / insertion AUC per view
    vitviz export --model M INPUT ... --out DIR [--views V,V] [--layers L,L] [--heads H,H]
                  [--target top|INDEX|NAME] [--format png|npy|both] [--batch-size N] [--precision auto|fp32|bf16]
                  [--shard K/N] [--overwrite] [--quiet]     the maps of many images, resumable (vitviz.batch.export)
    vitviz stats --model M INPUT ... --out DIR       attention distance / entropy per layer and head and artefact
                                                    frequency over the images: CSV + figure (vitviz.batch.stats)
    vitviz --version
    any of these with --debug                                       tracebacks of errors, for bug reports

Errors are printed as one line on stderr with exit status 2, never a traceback (``--debug``, anywhere on the command
line, prints the traceback too). ``predict`` and ``info`` take several files: each bad one is reported on its own
line, the others are still handled, and the status is 2 when any failed (``evaluate`` likewise for its images). This
module never imports Qt; the GUI is imported lazily.
"""

from __future__ import annotations

import argparse
import sys
import traceback
from collections.abc import Sequence
from pathlib import Path

from vitviz import __version__

SUBCOMMANDS = ("info", "predict", "models", "evaluate", "export", "stats")
# vitviz.evaluate.DEFAULT_VIEWS, written out so that building the parser does not import torch
EVALUATE_VIEWS = ("cls_last", "rollout", "grad_rollout", "relevance")


class _Parser(argparse.ArgumentParser):
    """argparse with its usage errors on one line too (the usage itself is one ``--help`` away)."""

    def error(self, message: str):  # type: ignore[override]
        print(f"{self.prog}: error: {message} (see '{self.prog} --help')", file=sys.stderr)
        raise SystemExit(2)


def _gui_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="vitviz",
        description="See what a Vision Transformer looks at. Without a sub-command, opens the GUI.",
        epilog="Sub-commands: 'vitviz info CHECKPOINT', 'vitviz predict CHECKPOINT IMAGE...', 'vitviz models', "
               "'vitviz evaluate CHECKPOINT IMAGE...'.",
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
    p.add_argument("--device", metavar="DEVICE", help="torch device, e.g. cpu or cuda")
    _add_debug(p)
    return p


def _user_model(args: argparse.Namespace):
    """``(model, note)`` for ``--model FILE.py:CLASS`` (vitviz.capture.foreign.load_user_model), else None; ``--weights`` and
    ``--init`` without it are an error."""
    if not (args.model and ".py:" in args.model):
        if args.weights is not None or args.init is not None:
            raise ValueError("--weights and --init go with --model path/to/file.py:ClassName (your own model class)")
        return None
    from vitviz.capture.foreign import load_user_model

    return load_user_model(args.model, weights=args.weights, init=args.init)


def _add_debug(p: argparse.ArgumentParser) -> None:
    p.add_argument("--debug", action="store_true",
                   help="print the full traceback of an error (errors are otherwise one line, exit status 2)")


def _add_load_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--num-heads", type=int, help="attention heads, for checkpoints that do not say")
    p.add_argument("--num-classes", type=int, help="replace the head with one of this many classes")
    p.add_argument("--img-size", type=int, help="nominal input size (position embeddings are resampled)")
    p.add_argument("--preprocess", choices=("imagenet", "inception"),
                   help="normalisation: ImageNet mean/std, or Inception's mean = std = 0.5")


def _sub_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="vitviz")
    sub = p.add_subparsers(dest="command", required=True)
    info = sub.add_parser("info", help="describe a checkpoint: format, architecture, parameters, preprocessing")
    info.add_argument("checkpoints", nargs="+", metavar="CHECKPOINT",
                      help="checkpoint files or directories, or pretrained names")
    _add_load_options(info)
    _add_debug(info)
    pred = sub.add_parser("predict", help="print the top classes for images")
    pred.add_argument("checkpoint", help="checkpoint file or directory, or a pretrained name")
    pred.add_argument("images", nargs="+", metavar="IMAGE")
    pred.add_argument("--top", type=int, default=5, help="how many classes to print (default 5)")
    pred.add_argument("--device", default="cpu")
    _add_load_options(pred)
    _add_debug(pred)
    models = sub.add_parser("models", help="list the named models (curated Hugging Face Hub models, torchvision's "
                                           "weights), their download size and whether they are cached")
    _add_debug(models)
    ev = sub.add_parser(
        "evaluate", help="faithfulness of the maps: deletion and insertion AUC per view against random rankings",
        description="For each image: the deletion and insertion perturbation curves of each view's map (patches "
                    "ranked by the map, replaced by the baseline a whole patch at a time; the probability of the "
                    "target class after each step) and of random rankings; prints the areas under the curves "
                    "(deletion: lower is better; insertion: higher is better), then their mean over the images.")
    ev.add_argument("checkpoint", help="checkpoint file or directory, or a pretrained name")
    ev.add_argument("images", nargs="+", metavar="IMAGE",
                    help="image files, folders (searched recursively for images) or glob patterns ('**' recurses)")
    ev.add_argument("--views", nargs="+", default=None, metavar="VIEW",
                    help=f"views to evaluate, space- or comma-separated (default: {' '.join(EVALUATE_VIEWS)}; "
                         "cls_last = [CLS] attention of the last layer, mean of heads)")
    ev.add_argument("--steps", type=int, default=20, help="steps per curve (default 20)")
    ev.add_argument("--baseline", choices=("mean", "blur", "noise"), default="mean",
                    help="what replaces a patch: the normalisation mean (default), the image blurred with a "
                         "Gaussian of sigma = one patch, or seeded noise")
    ev.add_argument("--seeds", type=int, default=10, help="random rankings of the random baseline (default 10)")
    ev.add_argument("--target", type=int, help="class to explain and score (default: each image's top class)")
    ev.add_argument("--csv", metavar="FILE", help="also write the AUCs as CSV (never replaces a file unless "
                                                  "--overwrite)")
    ev.add_argument("--overwrite", action="store_true", help="replace an existing --csv file")
    ev.add_argument("--batch-size", type=int, help="perturbed images per forward (default: by the model's size)")
    ev.add_argument("--device", default="cpu")
    _add_load_options(ev)
    _add_debug(ev)
    from vitviz.batch import export  # their flags live with them (no torch import)
    from vitviz.batch import stats

    exp = sub.add_parser(
        "export", help="the window's maps (PNG and/or npy) for many images, with a manifest; resumable, sharded",
        description="For every image: the requested views' maps, as the window exports them (PNG) and/or raw at "
                    "patch resolution (npy), and one line of manifest.jsonl (predictions, target, files, timings, "
                    "errors). A rerun skips the images already done; --shard K/N splits the work for a job array. "
                    "Exit status: 0, 2 (could not run), 64 + n (n images failed), 130 (interrupted).")
    export.add_arguments(exp)
    _add_load_options(exp)
    _add_debug(exp)
    st = sub.add_parser(
        "stats", help="attention statistics over images: distance and entropy per layer and head, artefact tokens",
        description="Mean attention distance and entropy per layer and head (mean and standard deviation over the "
                    "images; the ViT paper's Fig. 7 right) and how often each patch position holds a high-norm "
                    "token; writes CSV files and a figure (PNG, SVG).")
    stats.add_arguments(st)
    _add_load_options(st)
    _add_debug(st)
    return p


def _one_line(text: str) -> str:
    """``text`` on one line: library messages (torch's among them) can span several; so can a file name."""
    return " ".join(part.strip() for part in str(text).splitlines() if part.strip())


class _Reporter:
    """Prints each error as one line on stderr (``vitviz COMMAND: error: ...``), with the traceback under ``--debug``."""

    def __init__(self, command: str | None, debug: bool):
        self.prefix = f"vitviz {command}: error: " if command else "vitviz: error: "
        self.debug = debug

    def __call__(self, e: BaseException, subject: str | None = None) -> int:
        """Report ``e`` (about the file ``subject``, named when the message does not already); returns 2."""
        if isinstance(e, MemoryError):
            msg = f"not enough memory{f' ({e})' if str(e) else ''}"
        elif isinstance(e, (ValueError, RuntimeError, OSError)):  # the project's errors (CheckpointError,
            msg = str(e) or type(e).__name__  # ImageError, PretrainedError ...) and the system's
        else:  # a bug: say so, and how to get the traceback for a report
            msg = f"unexpected {type(e).__name__}: {e} (this is a bug in vitviz; '--debug' shows the traceback)"
        if subject is not None and not any(n in msg for n in (subject, str(Path(subject).expanduser()))):
            msg = f"{subject}: {msg}"
        if self.debug:
            traceback.print_exception(type(e), e, e.__traceback__, file=sys.stderr)
        print(self.prefix + _one_line(msg), file=sys.stderr, flush=True)
        return 2


def _load(args: argparse.Namespace, source: str):
    """A checkpoint path, or a pretrained name (only when no such file exists)."""
    from vitviz.model.sources.torch_hub import load_model

    return load_model(source, num_heads=args.num_heads, num_classes=args.num_classes, img_size=args.img_size,
                      preprocess=args.preprocess)


def _describe(args: argparse.Namespace, name: str) -> str:
    """What ``vitviz info`` prints about one checkpoint or name."""
    from vitviz.model.sources.torch_hub import PRETRAINED, cache_path, is_cached

    if not Path(name).exists() and name in PRETRAINED and not is_cached(name):  # describe without downloading
        info = PRETRAINED[name]
        p = info.preprocess
        labels = info.class_labels()
        return "\n".join([
            f"name:          {name} ({info.weights}), not downloaded yet",
            f"description:   {info.description}",
            f"download:      {info.url} ({info.size_mb:.1f} MB) -> {cache_path(name)}",
            (f"preprocessing: resize {p.resize} ({p.interpolation}), centre crop {p.crop[0]}x{p.crop[1]}, "
             f"mean {p.mean}, std {p.std}"),
            f"classes:       {len(labels) if labels else 'unknown'}",
            f"parameters:    {info.num_params:,} ({info.num_params / 1e6:.1f} M)",
        ])
    hub = _hub_listing_row(name) if not Path(name).exists() else None
    if hub is not None and not hub[3]:  # a curated Hub model not downloaded yet: described without downloading
        key, m, folder, _ = hub
        return "\n".join([
            f"name:          {key} ({m.title}), not downloaded yet",
            f"description:   {m.what}",
            f"download:      https://huggingface.co/{m.repo} ({m.size_mb:.1f} MB) -> {folder}",
        ])
    model = _load(args, name)
    n = model.num_params()
    return f"{model.spec.describe()}\nparameters:    {n:,} ({n / 1e6:.1f} M)"


def _cmd_info(args: argparse.Namespace, report: _Reporter) -> int:
    """Each checkpoint described (a blank line between them); each one that fails is one line on stderr."""
    status, shown = 0, 0
    for name in args.checkpoints:
        try:
            text = _describe(args, name)
        except Exception as e:  # noqa: BLE001 - reported on one line, the next file still described
            status = report(e, name)
            continue
        print(("\n" if shown else "") + text, flush=True)
        shown += 1
    return status


def _cmd_predict(args: argparse.Namespace, report: _Reporter) -> int:
    """The top classes of each image; an image that cannot be read is one line on stderr and the next one follows."""
    import torch

    from vitviz.imaging import ImageError, load_image

    if args.top < 1:
        raise ValueError(f"--top {args.top}: must be at least 1")
    model = _load(args, args.checkpoint).to(args.device)
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


def _pretrained_listing() -> list[tuple[str, float, str, Path]]:
    """``(name, size_mb, description, cache path)`` of every named pretrained model (no torch import)."""
    from vitviz.model.sources import catalog

    return [(n, row[3], catalog.description(n), catalog.cache_file(n)) for n, row in catalog.TORCHVISION_VITS.items()]


def _hub_listing_row(name: str):
    """``(key, HubModel, cache folder, cached)`` when ``name`` is a curated Hub model (key or repository), else None
    (no torch or huggingface_hub import)."""
    from vitviz.model.sources import catalog

    repo = name[len("hf-hub:"):] if name.startswith("hf-hub:") else name
    m = catalog.HUB_BY_KEY.get(name) or catalog.HUB_BY_REPO.get(repo)
    if m is None:
        return None
    return m.key, m, catalog.hub_repo_folder(m.repo), catalog.hub_is_cached(m.repo)


def _cmd_models(args: argparse.Namespace, report: _Reporter) -> int:
    """The curated Hugging Face Hub models by group, then torchvision's weights: size, cache state, description."""
    from vitviz.model.sources import catalog

    offline = " (offline mode: HF_HUB_OFFLINE is set)" if catalog.hf_offline() else ""
    print(f"Hugging Face Hub models, downloaded once into {catalog.hf_cache_dir()}{offline}:")
    width = max(len(m.key) for m in catalog.HUB_MODELS)
    for group, heading in catalog.HUB_GROUPS.items():
        print(f"  {heading}")
        for m in (m for m in catalog.HUB_MODELS if m.group == group):
            state = "cached" if catalog.hub_is_cached(m.repo) else "not cached"
            print(f"    {m.key:<{width}s} {m.size_mb:7.1f} MB  {state:<10s}  {m.title}: {m.what}")
            print(f"    {'':<{width}s} {m.repo}")
    print("  Any other timm or Hugging Face id opens too: 'vitviz --model timm/MODEL.TAG', 'vitviz --model "
          "facebook/dinov2-small'.")
    rows = _pretrained_listing()
    print("\ntorchvision ImageNet weights:")
    width = max(len(n) for n, *_ in rows)
    for name, size_mb, description, path in rows:
        state = "cached" if path.is_file() else "not cached"
        print(f"    {name:<{width}s} {size_mb:7.1f} MB  {state:<10s}  {description}")
        print(f"    {'':<{width}s} {path}")
    return 0


def _cmd_export(args: argparse.Namespace, report: _Reporter) -> int:
    from vitviz.batch import export

    return export.run_cli(args, report, _load)


def _cmd_stats(args: argparse.Namespace, report: _Reporter) -> int:
    from vitviz.batch import stats

    return stats.run_cli(args, report, _load)


def _cmd_evaluate(args: argparse.Namespace, report: _Reporter) -> int:
    """The faithfulness table of each image (progress bar on stderr), then the mean over the images; bad images are
    one line each on stderr and skipped."""
    from tqdm import tqdm

    from vitviz import views as view_registry
    from vitviz.evaluate import check_writable, evaluate_views, format_mean_table, write_csv
    from vitviz.imaging import load_image
    from vitviz.pipeline import Pipeline

    names = [n for v in (args.views or EVALUATE_VIEWS) for n in v.split(",") if n.strip()]
    names = [n.strip() for n in names]
    valid = ["cls_last"] + [v.key for v in view_registry.all_views()]
    unknown = [n for n in names if n not in valid]
    if unknown or not names:
        raise ValueError(f"--views {' '.join(unknown) or '(none)'}: unknown view; valid: {', '.join(valid)}")
    for opt, v in (("--steps", args.steps), ("--seeds", args.seeds), ("--batch-size", args.batch_size)):
        if v is not None and v < 1:
            raise ValueError(f"{opt} {v}: must be at least 1")
    if args.csv:
        check_writable(args.csv, overwrite=args.overwrite)  # before minutes of work, not after
    from vitviz.batch.inputs import inputs_for_cli

    images, status = inputs_for_cli(args.images, report)
    paths = [im.path for im in images]
    if not paths:
        return 2
    model = _load(args, args.checkpoint)
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


def _wants_debug(argv: list[str]) -> bool:
    """``--debug`` anywhere before a ``--`` (so that the errors of argument parsing can be shown in full too)."""
    options = argv[:argv.index("--")] if "--" in argv else argv
    return "--debug" in options


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``vitviz`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = _wants_debug(argv)
    while argv[:1] == ["--debug"]:  # 'vitviz --debug predict ...': the sub-command follows
        argv = argv[1:]
    if argv and argv[0] in SUBCOMMANDS:
        args = _sub_parser().parse_args(argv)
        handler = {"info": _cmd_info, "predict": _cmd_predict, "models": _cmd_models,
                   "evaluate": _cmd_evaluate, "export": _cmd_export, "stats": _cmd_stats}[args.command]
        report = _Reporter(args.command, debug)
        try:
            return handler(args, report)
        except KeyboardInterrupt:
            print("vitviz: interrupted", file=sys.stderr)
            return 130
        except Exception as e:  # noqa: BLE001 - one line (CheckpointError, PretrainedError, ImageError ... or a bug)
            return report(e)
    args = _gui_parser().parse_args(argv)
    try:
        from vitviz.gui.app import run_gui
    except ImportError as e:
        print(f"vitviz: the GUI is not available ({e}). Headless commands still work: "
              f"'vitviz info CHECKPOINT', 'vitviz predict CHECKPOINT IMAGE'.", file=sys.stderr)
        return 1
    try:
        user = _user_model(args)  # your own class: imported, built and checked before any window opens
        if user is not None:
            return int(run_gui(list(args.images), device=args.device, module=user[0], note=user[1]) or 0)
        return int(run_gui(list(args.images), model=args.model, device=args.device) or 0)
    except KeyboardInterrupt:
        print("vitviz: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - --model names nothing that exists (CheckpointError): said before any
        return _Reporter(None, debug)(e)  # window opens, on one line


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
