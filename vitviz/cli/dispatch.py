"""The ``vitviz`` command's entry point: a sub-command (one module each, ``vitviz.cli.*_command``) or, without one,
the window (:mod:`vitviz.cli.gui_command`). ``--debug`` anywhere before ``--`` prints tracebacks."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType

from vitviz.cli import gui_command
from vitviz.cli.commands import COMMANDS
from vitviz.cli.shared import Parser, Reporter

SUBCOMMANDS = tuple(COMMANDS)  # in the help's order


def command_module(name: str) -> ModuleType:
    """The module of the sub-command ``name`` (``vitviz.cli.<name>_command``: ``add_parser(sub)``, ``run(args,
    report)``, optionally ``prepare_argv(argv)``: the command line before argparse reads it), imported when that
    sub-command is given: the window, ``--version`` and the other sub-commands do not pay for its imports
    (``export``'s flags come from the option table, which imports numpy)."""
    return importlib.import_module(f"vitviz.cli.{name}_command")


def sub_parser(command: str) -> argparse.ArgumentParser:
    """The parser of ``vitviz COMMAND ...``: the sub-command ``command`` and its flags (the only one that can be
    given: ``argv[0]``)."""
    p = Parser(prog="vitviz")
    sub = p.add_subparsers(dest="command", required=True)
    command_module(command).add_parser(sub)
    return p


def wants_debug(argv: list[str]) -> bool:
    """``--debug`` anywhere before a ``--`` (so that the errors of argument parsing can be shown in full too)."""
    options = argv[:argv.index("--")] if "--" in argv else argv
    return "--debug" in options


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``vitviz`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = wants_debug(argv)
    while argv[:1] == ["--debug"]:  # 'vitviz --debug predict ...': the sub-command follows
        argv = argv[1:]
    if not (argv and argv[0] in SUBCOMMANDS):
        return gui_command.launch(argv, debug)
    prepare = getattr(command_module(argv[0]), "prepare_argv", None)  # a command's own reading of its values
    args = sub_parser(argv[0]).parse_args(prepare(argv) if prepare else argv)
    report = Reporter(args.command, debug)
    try:
        return command_module(args.command).run(args, report)
    except KeyboardInterrupt:
        print("vitviz: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # noqa: BLE001 - one line (CheckpointError, PretrainedError, ImageError ... or a bug)
        return report(e)
