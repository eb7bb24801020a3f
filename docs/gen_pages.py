"""The documentation pages written from the code at build time (mkdocs-gen-files runs this script on every
``mkdocs build``): the command-line reference from the argparse parsers, and the views, options and model families
tables from their registries. Nothing here is written by hand, so nothing here drifts from the code.

Each ``*_page()`` returns Markdown; ``python docs/gen_pages.py DIR`` writes the pages into DIR without mkdocs."""

from __future__ import annotations

import argparse
import inspect
import os
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this checkout's vitviz

PAGES = {"reference/cli.md": "cli_page", "reference/views.md": "views_page", "reference/options.md": "options_page",
         "reference/families.md": "families_page"}
GENERATED = "*Generated from the code by `docs/gen_pages.py` at every build: do not edit.*"


def cell(text: object) -> str:
    """``text`` fit for a Markdown table cell (one line; pipes, asterisks and underscores escaped, so that names like
    ``eva02_*`` stay as written)."""
    parts = " ".join(str(text).split()).replace("|", "\\|").split("`")
    # (inside code spans, the odd parts, a backslash would show: only the prose is escaped)
    return "`".join(p if i % 2 else p.replace("*", "\\*").replace("_", "\\_") for i, p in enumerate(parts))


def summary(doc: str | None) -> str:
    """The first paragraph of a docstring, on one line, its reST roles and literals as Markdown code."""
    text = " ".join(inspect.cleandoc(doc or "").split("\n\n")[0].split())
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"`\1`", text)  # :func:`vitviz.x` -> `vitviz.x`
    return text.replace("``", "`").replace(" No Qt.", "").replace("No Qt. ", "")


def cli_page() -> str:
    from vitviz.cli.commands import COMMANDS
    from vitviz.cli.dispatch import sub_parser
    from vitviz.cli.gui_command import gui_parser
    from vitviz.cli.run_flags import RUN_FLAGS

    os.environ["COLUMNS"] = "110"  # argparse wraps the help at the terminal's width: a fixed one here
    out = ["# Command line", "", GENERATED, "",
           "Every command that runs a model takes the same run flags "
           f"({', '.join(f'`{f}`' for f in RUN_FLAGS)}, the last where it batches; declared once in "
           "`vitviz.cli.run_flags`) and says in its first line (on stderr) what it resolved them to, e.g. "
           "`vitviz predict: tiny on cpu, auto: bf16 (the CPU has AVX-512 BF16)`. Errors are one line on stderr "
           "with exit status 2; `--debug` adds the traceback.", "",
           "| command | what it does |", "|---|---|", "| `vitviz [IMAGE ...]` | open the window |"]
    out += [f"| [`vitviz {name}`](#vitviz-{name}) | {cell(what)} |" for name, (_, what) in COMMANDS.items()]
    out += ["", "## vitviz", "", "```text", gui_parser().format_help().rstrip(), "```"]
    for name in COMMANDS:
        action = next(a for a in sub_parser(name)._actions if isinstance(a, argparse._SubParsersAction))
        parser = action.choices[name]
        out += ["", f"## vitviz {name}", "", "```text", parser.format_help().rstrip(), "```"]
    return "\n".join(out) + "\n"


def views_page() -> str:
    from vitviz.views import view_registry

    out = ["# Views", "", GENERATED, "",
           "Every view of the window, `vitviz export --views` and `vitviz evaluate --views`, in menu order "
           "(`vitviz.views.view_registry`). *Reads*: the options its map depends on ([Options](options.md)); "
           "the formulas are in [Methods](../methods.md). *Input*: what the map is made of, which says how a streamed "
           "pass gathers it (`vitviz.views.kinds`: one layer's attention `rows`, one layer's `tokens`, a `product` "
           "over the layers, the whole `result`).", "",
           "| key | title | shortcut | reads | input | needs | quantity |", "|---|---|---|---|---|---|---|"]
    views = view_registry.all_views()
    for v in views:
        needs = [w for w, on in (("gradients", v.needs_grads), ("[CLS]", v.needs_cls)) if on] or ["-"]
        quantity = f"{v.quantity} ({v.unit})" if v.unit else v.quantity
        out.append(f"| `{v.key}` | {cell(v.title)} | {view_registry.shortcut(v) or ''} | "
                   f"{cell(', '.join(sorted(v.reads)) or '-')} | {v.stream_input or '-'} | {', '.join(needs)} | "
                   f"{cell(quantity)} |")
    out += ["", "## What each view shows"]
    for v in views:
        out += ["", f"### `{v.key}`: {v.title}", "", summary(sys.modules[type(v).__module__].__doc__)]
    return "\n".join(out) + "\n"


def options_page() -> str:
    from vitviz.views.options import all_options, cli_flags

    flags = {f.option: f.flag for f in cli_flags()}
    out = ["# Options", "", GENERATED, "",
           "The one table of options (`vitviz.views.options`): the window's controls, session files, remembered "
           "settings and `vitviz export`'s display flags all derive from it. *Also*: *map* (a view may read it: the "
           "map depends on it), its `vitviz export` flag, the key the window remembers it under.", "",
           "| option | what it does | kind | default | values | also |", "|---|---|---|---|---|---|"]
    for o in all_options():
        if o.choices:
            values = ", ".join(f"`{c}`" for c in o.choices)
        elif o.range != (None, None):
            lo, hi = o.range
            values = f"{'' if lo is None else lo} … {'' if hi is None else hi}"
        else:
            values = ""
        also = [w for w, on in (("map", o.analysis), (f"`{flags.get(o.name)}`", o.name in flags),
                                (f"remembered as `{o.setting}`", bool(o.setting))) if on]
        out.append(f"| `{o.name}` | {cell(o.help or o.label)} | {o.kind} | `{o.default!r}` | {cell(values)} | "
                   f"{cell(', '.join(also))} |")
    return "\n".join(out) + "\n"


def families_page() -> str:
    from vitviz.model.checkpoints.registry import FORMATS, SUPPORTED
    from vitviz.model.sources.catalog import HUB_GROUPS, HUB_MODELS, TORCHVISION_VITS

    out = ["# Model families", "", GENERATED, "", f"Supported: {SUPPORTED}.", "",
           "## Checkpoint layouts", "",
           "`vitviz.model.checkpoints.registry.FORMATS`, in the order they are tried (the first whose detection "
           "accepts a file reads it). See [Models and checkpoints](../models.md) for the default preprocessing of "
           "each family.", "", "| layout | recognised by | reader |", "|---|---|---|"]
    for f in FORMATS:
        out.append(f"| `{f.NAME}` | {cell(f.DESCRIPTION)} | {cell(summary(f.__doc__))} |")
    out += ["", "## Models by name", "",
            "The curated names of `--model`, `vitviz models` and the Model menu "
            "(`vitviz.model.sources.catalog.HUB_MODELS`).", "",
            "| name | model | group | download | text tower | Hub repository |", "|---|---|---|---|---|---|"]
    for m in HUB_MODELS:
        out.append(f"| `{m.key}` | {cell(m.title)}: {cell(m.what)} | {cell(HUB_GROUPS.get(m.group, m.group))} | "
                   f"{m.size_mb:.0f} MB | {cell(m.text_tower())} | `{m.repo}` |")
    out += ["", "torchvision's ImageNet weights (`TORCHVISION_VITS`): name, weights, download, top-1 on ImageNet.", "",
            "| name | weights | download | top-1 | input |", "|---|---|---|---|---|"]
    for name, (_, weights, _, mb, _, top1, _, crop, _) in TORCHVISION_VITS.items():
        out.append(f"| `{name}` | {weights} | {mb:.0f} MB | {top1:.1f} % | {crop} px |")
    return "\n".join(out) + "\n"


def write_pages(write) -> None:
    """Each page through ``write(path, text)``."""
    for path, fn in PAGES.items():
        write(path, globals()[fn]())


try:
    import mkdocs_gen_files
except ImportError:  # (run by hand)
    mkdocs_gen_files = None

if mkdocs_gen_files is not None and __name__ != "__main__":
    def _gen(path: str, text: str) -> None:
        with mkdocs_gen_files.open(path, "w") as fh:
            fh.write(text)

    write_pages(_gen)

if __name__ == "__main__":
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "site-pages")

    def _write(path: str, text: str) -> None:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text, encoding="utf-8")

    write_pages(_write)
