"""``vitviz info CHECKPOINT ...``: describe checkpoints or named models (format, architecture, parameters,
preprocessing); a named model not downloaded yet is described without downloading it."""

from __future__ import annotations

import argparse
from pathlib import Path

from vitviz.cli.commands import summary
from vitviz.cli.models_command import hub_listing_row
from vitviz.cli.shared import Reporter, add_debug, add_load_options, load


def add_parser(sub) -> None:
    info = sub.add_parser("info", help=summary("info"))
    info.add_argument("checkpoints", nargs="+", metavar="CHECKPOINT",
                      help="checkpoint files or directories, or pretrained names")
    add_load_options(info)
    add_debug(info)


def describe(args: argparse.Namespace, name: str) -> str:
    """What ``vitviz info`` prints about one checkpoint or name."""
    from vitviz.model.sources.torch_hub import PRETRAINED, cache_path, is_cached  # torch

    if name in PRETRAINED and not Path(name).exists() and not is_cached(name):  # describe without downloading
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
    hub = hub_listing_row(name)  # (a name first: Path.exists raises for a name too long for the system)
    if hub is not None and not hub[3] and not Path(name).exists():  # a curated Hub model not downloaded yet
        key, m, folder, _ = hub
        return "\n".join([
            f"name:          {key} ({m.title}), not downloaded yet",
            f"description:   {m.what}",
            f"download:      https://huggingface.co/{m.repo} ({m.size_mb:.1f} MB) -> {folder}",
        ])
    model = load(args, name)
    n = model.num_params()
    return f"{model.spec.describe()}\nparameters:    {n:,} ({n / 1e6:.1f} M)"


def run(args: argparse.Namespace, report: Reporter) -> int:
    """Each checkpoint described (a blank line between them); each one that fails is one line on stderr."""
    status, shown = 0, 0
    for name in args.checkpoints:
        try:
            text = describe(args, name)
        except Exception as e:  # noqa: BLE001 - reported on one line, the next file still described
            status = report(e, name)
            continue
        print(("\n" if shown else "") + text, flush=True)
        shown += 1
    return status
