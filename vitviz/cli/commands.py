"""The sub-commands of ``vitviz`` in one place: their names in the help's order, how each is called and what it does.
The dispatcher (:mod:`vitviz.cli.dispatch`), each command's own parser (its one-line ``help``) and ``vitviz --help``
(:mod:`vitviz.cli.gui_command`) read this table, so a new sub-command is listed everywhere by one row. Standard
library only."""

from __future__ import annotations

import textwrap

# name -> (its arguments, what it does)
COMMANDS: dict[str, tuple[str, str]] = {
    "info": ("CHECKPOINT ...", "describe checkpoints or named models: format, architecture, parameters, "
                               "preprocessing"),
    "predict": ("CHECKPOINT IMAGE ...", "print the top classes for images, or the zero-shot probabilities over text "
                                        "prompts (--text, CLIP and SigLIP)"),
    "models": ("", "list the named models (curated Hugging Face Hub models, torchvision's weights), their download "
                   "size and whether they are cached"),
    "evaluate": ("CHECKPOINT IMAGE ...", "faithfulness of the maps: deletion and insertion AUC per view against "
                                         "random rankings"),
    "export": ("--model M INPUT ... --out DIR", "the window's maps (PNG and/or npy) for many images, with a "
                                                "manifest; resumable, sharded"),
    "stats": ("--model M INPUT ... --out DIR", "attention statistics over images: distance and entropy per layer "
                                               "and head, artefact tokens"),
    "merge": ("OUT", "join the parts of a sharded export, stats or evaluate (--shard K/N, torchrun, SLURM arrays) "
                     "into the files of one run; names what is missing or doubled"),
    "lens": ("MODEL IMAGE", "the logit lens: the model's head read after every block (top classes and the target's "
                            "probability per layer)"),
    "ablate": ("MODEL IMAGE", "head knock-out: the target's score with each (layer, head) removed (--mode zero|mean)"),
    "patch": ("MODEL CLEAN CORRUPT", "activation patching: each block's output from the clean image into the "
                                     "corrupted run, at [CLS], all tokens and each patch; the share recovered"),
}


def summary(name: str) -> str:
    """What the sub-command ``name`` does, in one line (its parser's ``help``)."""
    return COMMANDS[name][1]


def listing() -> str:
    """Every sub-command, how it is called and what it does: the end of ``vitviz --help``."""
    lines = ["sub-commands ('vitviz COMMAND --help' for each):"]
    for name, (arguments, what) in COMMANDS.items():
        lines.append(f"  vitviz {name} {arguments}".rstrip())
        lines += textwrap.wrap(what, width=79, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return "\n".join(lines)
