"""What the sub-commands of ``vitviz`` share: the parser (usage errors on one line), the error reporter (one line on
stderr, exit status 2, the traceback under ``--debug``), the model's load flags and loader. Nothing here imports
torch when the module is imported."""

from __future__ import annotations

import argparse
import os
import re
import sys
import traceback

from vitviz.model.sources.name_errors import ModelNameError  # (plain strings: no torch)
from vitviz.model.text.templates import TEMPLATE_SETS  # (plain strings: no torch)


class Parser(argparse.ArgumentParser):
    """argparse with its usage errors on one line too (the usage itself is one ``--help`` away)."""

    def error(self, message: str):  # type: ignore[override]
        print(f"{self.prog}: error: {message} (see '{self.prog} --help')", file=sys.stderr)
        raise SystemExit(2)


def add_debug(p: argparse.ArgumentParser) -> None:
    p.add_argument("--debug", action="store_true",
                   help="print the full traceback of an error (errors are otherwise one line, exit status 2)")


def add_load_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--num-heads", type=int, help="attention heads, for checkpoints that do not say")
    p.add_argument("--num-classes", type=int, help="replace the head with one of this many classes")
    p.add_argument("--img-size", type=int, help="nominal input size (position embeddings are resampled)")
    p.add_argument("--preprocess", choices=("imagenet", "inception"),
                   help="normalisation: ImageNet mean/std, or Inception's mean = std = 0.5")


def add_text_options(p: argparse.ArgumentParser, what: str) -> None:
    """``--text "a cat; a dog"`` (``what`` it does in the command) and ``--templates`` (CLIP, SigLIP prompts)."""
    p.add_argument("--text", metavar="PROMPTS",
                   help="text prompts separated by ';' (a CLIP or SigLIP model with its text tower: an open_clip or "
                        f"Hugging Face CLIPModel / SiglipModel folder, or a named model that has one): {what}")
    p.add_argument("--templates", choices=tuple(TEMPLATE_SETS),
                   help="with --text: each prompt as typed (none, default), in CLIP's 'a photo of a {}.' (photo), or "
                        "averaged over the 80 ImageNet templates of CLIP's zero-shot code (imagenet)")


def check_templates(args: argparse.Namespace) -> None:
    """``--templates`` only with ``--text`` (ValueError naming the flag otherwise)."""
    if getattr(args, "templates", None) and getattr(args, "text", None) is None:
        raise ValueError(f"--templates {args.templates}: give --text too (the templates are put around its prompts)")


LONG_WORD = 160  # characters of one word (a value, a path) echoed whole; longer ones are shortened
LINE_MAX = 2000  # characters of one error line


def one_line(text: str) -> str:
    """``text`` on one line: library messages (torch's among them) can span several; so can a file name. A value
    echoed back is bounded: a word longer than :data:`LONG_WORD` keeps its start and end with its length between
    (a 10,000-character ``--target`` or a 5,000-digit job id is not printed whole, once or twice), and the line is
    cut at :data:`LINE_MAX`."""
    line = " ".join(part.strip() for part in str(text).splitlines() if part.strip())
    if len(line) <= LONG_WORD:
        return line
    line = re.sub(rf"\S{{{LONG_WORD + 1},}}", lambda m: f"{m[0][:100]}…({len(m[0])} characters)…{m[0][-30:]}", line)
    return line if len(line) <= LINE_MAX else f"{line[:LINE_MAX - 40]}… ({len(line)} characters in all)"


class Reporter:
    """Prints each error as one line on stderr (``vitviz COMMAND: error: ...``), with the traceback under
    ``--debug``."""

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
        if subject is not None and not isinstance(e, ModelNameError) \
                and not any(n in msg for n in (subject, os.path.expanduser(subject))):  # (a ModelNameError
            msg = f"{subject}: {msg}"  # names what was typed, quoted or shortened where needed)
        if self.debug:
            traceback.print_exception(type(e), e, e.__traceback__, file=sys.stderr)
        print(self.prefix + one_line(msg), file=sys.stderr, flush=True)
        return 2


def load(args: argparse.Namespace, source: str):
    """A checkpoint path, or a pretrained name (only when no such file exists)."""
    from vitviz.model.sources.refs import load_model  # torch: imported by the commands that load a model

    return load_model(source, num_heads=args.num_heads, num_classes=args.num_classes, img_size=args.img_size,
                      preprocess=args.preprocess)
