"""``vitviz evaluate``'s ground-truth flags (``--masks``, ``--ignore-value``, ``--classes``, ``--only``,
``--pointing-tolerance``, ``--target gt``, ``gtsegs_ijcv.mat`` as IMAGES) checked before the model is loaded, and
per image what to evaluate against what: :class:`GroundTruthPlan`."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any

from vitviz.batch.inputs import InputImage
from vitviz.evaluate.ground_truth import GroundTruth, GroundTruthSource, mat_inputs
from vitviz.imaging import LoadedImage, image_from_array, load_image


@dataclass
class GroundTruthPlan:
    """What ``vitviz evaluate`` does with ground truth.

    Attributes:
        source: the readers (None without ground truth).
        images: the images of the ``gtsegs_ijcv.mat`` files among IMAGES; ``rest``: the other IMAGES items.
        curves: whether the perturbation curves run (not with ``--only localisation``).
        localise: whether the maps are scored against the ground truth.
        target_gt: ``--target gt``: each image's target is its mask's main class.
        prompts: OpenImages point labels: every label's words, the prompts of the zero-shot model (else None).
    """

    source: GroundTruthSource | None
    images: list[InputImage] = field(default_factory=list)
    rest: list[str] = field(default_factory=list)
    curves: bool = True
    localise: bool = False
    target_gt: bool = False
    prompts: list[str] | None = None
    flags: dict[str, Any] = field(default_factory=dict)

    def load(self, path: str) -> LoadedImage:
        """The image: a ``file.mat/0001`` entry's pixels, or the file."""
        arr = None if self.source is None else self.source.load_image(path)
        return load_image(path) if arr is None else image_from_array(arr, path)

    def jobs(self, path: str, rel: str, size: tuple[int, int], targets: list[Any], prompts: list[str] | None
             ) -> list[tuple[Any, GroundTruth | None, int | None]]:
        """``(target, ground truth, object class)`` per table of one image (ValueError naming the mask file)."""
        if not self.localise:
            return [(t, None, None) for t in targets]
        found = self.source.read(path, rel, size)
        if self.prompts is not None:  # one table per point label, the label's prompt as the target
            return [(self.prompts.index(gt.label), gt, None) for gt in found]
        gt = found[0]
        if self.target_gt:
            cls = gt.main_class()
            if cls is None:
                raise ValueError(f"{gt.source}: --target gt: the mask holds no class (only background or ignored)")
            return [(cls, gt, cls)]
        return [(t, gt, None) for t in targets]

    def settings(self) -> dict[str, Any]:
        """The flags a shard's part records (the merge refuses parts that differ)."""
        return dict(self.flags)


def ground_truth_plan(args: argparse.Namespace) -> GroundTruthPlan:
    """The plan of ``args`` (ValueError naming the flag: a flag without ``--masks``, ``--only localisation`` or
    ``--target gt`` without ground truth, ``--text`` with point labels, a negative tolerance, a ``.mat`` that is not
    an ImageNet-segmentation file ...)."""
    masks, only = args.masks, args.only
    for flag, value in (("--ignore-value", args.ignore_value), ("--classes", args.classes)):
        if value is not None and masks is None:
            raise ValueError(f"{flag} {value}: give --masks too (it applies to the masks)")
    if args.pointing_tolerance < 0:
        raise ValueError(f"--pointing-tolerance {args.pointing_tolerance:g}: must be 0 or more pixels")
    mats, rest = mat_inputs(args.images)
    has_gt = masks is not None or bool(mats)
    target_gt = str(args.target).strip().lower() == "gt"
    if only == "localisation" and not has_gt:
        raise ValueError("--only localisation: give the ground truth (--masks, or gtsegs_ijcv.mat as IMAGE)")
    if target_gt and not has_gt:
        raise ValueError("--target gt: give the ground truth (--masks, or gtsegs_ijcv.mat as IMAGE)")
    source = GroundTruthSource(masks, classes=args.classes, ignore_value=args.ignore_value) if has_gt else None
    if args.classes is not None and source.kind != "points":
        raise ValueError(f"--classes {args.classes}: only with an OpenImages point-label --masks .csv")
    if target_gt and source.kind in ("points", "boxes"):
        raise ValueError(f"--target gt: the {source.kind} in {masks} name classes, not the model's class indices; "
                         "give masks or leave --target out")
    prompts = None
    if source is not None and source.kind == "points":
        if args.text is not None:
            raise ValueError("--text: the point labels give the prompts (one per label); leave --text out")
        prompts = source.reader.labels()
        if not prompts:
            raise ValueError(f"--masks {masks}: no yes/no point in the file")
    localise = has_gt and only != "faithfulness"
    flags = {"masks": None if masks is None else str(masks), "ignore_value": args.ignore_value,
             "only": only, "pointing_tolerance": float(args.pointing_tolerance)} if has_gt else {}
    return GroundTruthPlan(source, [InputImage(name, rel) for name, rel in mats], rest,
                           curves=only != "localisation", localise=localise, target_gt=target_gt, prompts=prompts,
                           flags=flags)
