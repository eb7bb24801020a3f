"""The ``vitviz`` command: the GUI by default, plus small headless sub-commands.

Usage::

    vitviz [IMAGE ...] [--model PATH_OR_NAME] [--device DEVICE] [--precision P]   open the GUI
    vitviz SESSION.vitviz.json                                      the GUI showing a saved session
                                                                    (vitviz.document.state)
    vitviz [IMAGE ...] --model FILE.py:CLASS [--weights CKPT] [--init JSON]
                                                                    the GUI on your own model class (runs FILE.py)
    vitviz info CHECKPOINT [CHECKPOINT ...] [--num-heads N] [--preprocess imagenet|inception]
    vitviz predict CHECKPOINT IMAGE [IMAGE ...] [--top K] [--precision auto|fp32|bf16|fp16] [--preprocess ...]
    vitviz models                                                   named models (curated Hub list, torchvision)
                                                                    and whether they are cached
    vitviz evaluate CHECKPOINT IMAGE|FOLDER|GLOB ... [--views V ...] [--steps N] [--baseline mean|blur|noise]
                    [--csv FILE [--overwrite]]                      faithfulness: deletion / insertion AUC per view
    vitviz export --model M INPUT ... --out DIR [--views V,V] [--layers L,L] [--heads H,H]
                  [--target top|INDEX|NAME] [--format png|npy|both] [--batch-size N] [--precision auto|fp32|bf16]
                  [--shard K/N] [--overwrite] [--quiet]     the maps of many images, resumable (vitviz.batch.export)
    vitviz stats --model M INPUT ... --out DIR       attention distance / entropy per layer and head and artefact
                                                    frequency over the images: CSV + figure (vitviz.batch.stats)
    vitviz merge OUT [--overwrite]                  the parts of a sharded export, stats or evaluate (--shard K/N,
                                                    torchrun, SLURM: vitviz.batch.launcher) joined into the files
                                                    of one run (vitviz.batch.merge)
    vitviz --version
    any of these with --debug                                       tracebacks of errors, for bug reports

Errors are printed as one line on stderr with exit status 2, never a traceback (``--debug``, anywhere on the command
line, prints the traceback too). ``predict`` and ``info`` take several files: each bad one is reported on its own
line, the others are still handled, and the status is 2 when any failed (``evaluate`` likewise for its images). This
package never imports Qt; the GUI is imported lazily.

One module per sub-command (``info_command``, ``predict_command``, ``models_command``, ``evaluate_command``,
``export_command``, ``stats_command``, ``merge_command``; the window: ``gui_command``), what they share in
``shared`` (parser, error reporter, model loading), ``run_flags`` (``--device``, ``--precision``, ``--batch-size`` of
every command that runs a model, declared once; each such command's first line names what they resolved to, e.g.
``vitviz predict: tiny on cpu, auto: bf16 (the CPU has AVX-512 BF16)``) and ``batch_flags`` (the other flags of
export and stats, the shard of the batch commands), the dispatcher in ``dispatch``, and the
table of sub-commands (names, arguments, one-line help: ``vitviz --help`` lists them all) in ``commands``.
Building the parser imports neither torch nor numpy: each command imports what it needs when it runs.
"""

from vitviz.cli.dispatch import main

__all__ = ["main"]
