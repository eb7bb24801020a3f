"""What the faithfulness measures return: a perturbation curve, the random baseline's curves, a randomisation check,
and the table of several views (one row per view, the random row last; with ground truth, each view's localisation
scores) with its text form."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from vitviz.evaluate.metrics import curve_auc
from vitviz.evaluate.protocol import LOCALISATION_METRICS


@dataclass(eq=False)
class PerturbationCurve:
    """One perturbation curve (see :mod:`vitviz.evaluate.perturbation` for the formulas).

    Attributes:
        mode: ``"deletion"``, ``"insertion"`` or ``"negative"``.
        baseline: ``"mean"``, ``"blur"`` or ``"noise"``.
        target: the class (int) whose softmax probability is read, or the target (a similarity or callable target,
            :mod:`vitviz.capture.targets`) whose own score is read.
        fractions: float64 ``[steps + 1]``, ``n_k / P`` from 0 to 1.
        scores: float64 ``[steps + 1]``, the score after step k (the probability of the class, the target's score).
        counts: int64 ``[steps + 1]``, ``n_k``: patches perturbed (deletion, negative) or revealed (insertion).
        auc: trapezoid area under ``scores`` over ``fractions``.
    """

    mode: str
    baseline: str
    target: Any
    fractions: np.ndarray
    scores: np.ndarray
    counts: np.ndarray
    auc: float

    @property
    def higher_is_better(self) -> bool:
        """False for deletion (a faithful map makes the score fall fast), True for insertion and negative."""
        return self.mode != "deletion"


@dataclass(eq=False)
class RandomBaseline:
    """Perturbation curves for ``R`` random rankings of the patches.

    Attributes:
        mode, baseline, target: as in :class:`PerturbationCurve`.
        fractions: ``[steps + 1]`` (the same for every ranking).
        scores: ``[R, steps + 1]``, one curve per random ranking.
        aucs: ``[R]``.
        counts: ``[steps + 1]``, patches perturbed or revealed at each step.
        seed: the base seed (ranking r is ``numpy.random.default_rng([seed, r]).permutation(P)``).
    """

    mode: str
    baseline: str
    target: Any
    fractions: np.ndarray
    scores: np.ndarray
    aucs: np.ndarray
    counts: np.ndarray
    seed: int = 0

    @property
    def seeds(self) -> int:
        return int(self.aucs.shape[0])

    @property
    def auc_mean(self) -> float:
        return float(self.aucs.mean())

    @property
    def auc_std(self) -> float:
        """Sample standard deviation over the rankings (``ddof=1``; 0 for a single ranking)."""
        return float(self.aucs.std(ddof=1)) if self.aucs.size > 1 else 0.0

    @property
    def mean_curve(self) -> PerturbationCurve:
        """The mean of the curves (its AUC is ``auc_mean``: the trapezoid rule is linear)."""
        s = self.scores.mean(0)
        return PerturbationCurve(self.mode, self.baseline, self.target, self.fractions, s, self.counts,
                                 curve_auc(self.fractions, s))


@dataclass(eq=False)
class RandomisationCheck:
    """Cascading model randomisation (Adebayo et al. 2018) of one view's map.

    Attributes:
        view: the view's key.
        target: what the gradient views explained (a class index, a similarity or callable target; None for a view
            without gradients).
        original: ``[gh, gw]``, the map of the unchanged model.
        randomised: per stage, the blocks re-initialised so far (stage i: ``(L-1, ..., L-1-i)``).
        maps: ``[L, gh, gw]``, the map after each stage.
        correlations: ``[L]``, Spearman rank correlation between ``original`` and each stage's map (NaN where a
            map is constant).
    """

    view: str
    target: Any
    original: np.ndarray
    randomised: list[tuple[int, ...]]
    maps: np.ndarray
    correlations: np.ndarray


@dataclass(eq=False)
class LocalisationScores:
    """The localisation metrics of one map: ``values[name]`` for every name of
    :data:`vitviz.evaluate.protocol.LOCALISATION_METRICS` (NaN where undefined), ``reasons[name]`` why a value is
    NaN."""

    values: dict[str, float] = field(default_factory=dict)
    reasons: dict[str, str] = field(default_factory=dict)

    def get(self, name: str) -> float:
        return self.values.get(name, math.nan)

    def why(self) -> str:
        """The distinct reasons, joined (empty when every metric has a value)."""
        return "; ".join(dict.fromkeys(self.reasons.values()))


@dataclass(eq=False)
class ViewScore:
    """One view's row of a :class:`FaithfulnessTable`.

    Attributes:
        key: the name asked for (``"cls_last"``, ``"rollout"``, ...).
        title: what the row shows, for tables and legends.
        saliency: ``[gh, gw]`` float32, the map that was ranked (None when the view is unavailable).
        deletion, insertion: the curves (None when unavailable).
        unavailable: why the view has no map for this model (None when it has one).
        localisation: the map's :class:`LocalisationScores` against the image's ground truth
            (:mod:`vitviz.evaluate.localisation`), None without ground truth.
    """

    key: str
    title: str
    saliency: np.ndarray | None
    deletion: PerturbationCurve | None
    insertion: PerturbationCurve | None
    unavailable: str | None = None
    localisation: LocalisationScores | None = None

    def localisation_value(self, name: str) -> float:
        """One localisation metric (NaN without ground truth or where undefined)."""
        return math.nan if self.localisation is None else self.localisation.get(name)

    @property
    def deletion_auc(self) -> float:
        return math.nan if self.deletion is None else self.deletion.auc

    @property
    def insertion_auc(self) -> float:
        return math.nan if self.insertion is None else self.insertion.auc


@dataclass(eq=False)
class FaithfulnessTable:
    """What :func:`evaluate_views` returns: per view, its deletion and insertion curves, and the random baseline.

    Attributes:
        source: the image's name.
        target: the class whose probability the curves read, or None when the target is not a class (a similarity
            to a reference, a function of the output: the curves read its own score).
        label: that class's name, or the target in words ("similar to image cat.jpg").
        probability: the score on the unperturbed image (the class's probability, the similarity ...).
        steps, baseline: the curves' settings.
        views: one :class:`ViewScore` per view asked for, in order.
        random_deletion, random_insertion: the random baseline of each mode (None when the curves were not run:
            ``vitviz evaluate --only localisation``).
        measure: what the curves read: ``"probability"`` (a class), ``"similarity"``, ``"value"`` (a function).
        ground_truth: where the image's ground truth came from (None without: no localisation scores).
    """

    source: str
    target: int | None
    label: str
    probability: float
    steps: int
    baseline: str
    views: list[ViewScore]
    random_deletion: RandomBaseline | None
    random_insertion: RandomBaseline | None
    measure: str = "probability"
    ground_truth: str | None = None

    @property
    def has_curves(self) -> bool:
        return self.random_deletion is not None

    @property
    def has_localisation(self) -> bool:
        return any(v.localisation is not None for v in self.views)

    def target_words(self) -> str:
        """The target and its score on the unperturbed image: ``3 'tabby cat' (p = 0.912)``, ``similar to image
        ref.jpg (similarity = 0.871)``."""
        if self.target is not None:
            return f"{self.target} {self.label!r} (p = {self.probability:.3f})"
        return f"{self.label} ({self.measure} = {self.probability:.3f})"

    def rows(self) -> list[tuple[str, float, float]]:
        """``[(key, deletion AUC, insertion AUC)]`` for every view, then ``("random", mean, mean)`` (when the curves
        ran)."""
        out = [(v.key, v.deletion_auc, v.insertion_auc) for v in self.views]
        if self.has_curves:
            out.append(("random", self.random_deletion.auc_mean, self.random_insertion.auc_mean))
        return out

    def best(self) -> tuple[str | None, str | None]:
        """The keys of the views with the lowest deletion AUC and the highest insertion AUC (None if none)."""
        ok = [v for v in self.views if v.deletion is not None]
        if not ok:
            return None, None
        return (min(ok, key=lambda v: v.deletion_auc).key, max(ok, key=lambda v: v.insertion_auc).key)

    def format(self) -> str:
        """The table as text (best per column marked with ``*``, the random row as mean +- std), then the
        localisation table when there is ground truth."""
        if not self.has_curves:
            return self.format_localisation(f"{self.source}: target {self.target_words()}")
        loc = "\n" + self.format_localisation("  localisation") if self.has_localisation else ""
        return self.format_curves() + loc

    def format_localisation(self, head: str) -> str:
        """Each view's localisation scores as text (``-`` where undefined, the reason after the row)."""
        width = max([len(v.key) for v in self.views] + [4])
        scored = [v.localisation for v in self.views if v.localisation is not None]
        names = [n for n in LOCALISATION_METRICS if any(not math.isnan(s.get(n)) for s in scored)]
        names = names or list(LOCALISATION_METRICS)  # (the columns that have a value somewhere)
        lines = [f"{head} against {self.ground_truth or 'no ground truth'} (higher is better)",
                 f"  {'view':<{width}s}  " + "  ".join(f"{n:>8s}" for n in names)]
        for v in self.views:
            if v.localisation is None:
                lines.append(f"  {v.key:<{width}s}  " + "  ".join(f"{'-':>{max(8, len(n))}s}" for n in names)
                             + (f"  ({v.unavailable})" if v.unavailable else ""))
                continue
            cells = [v.localisation.get(n) for n in names]
            why = "; ".join(dict.fromkeys(r for k, r in v.localisation.reasons.items() if k in names))
            lines.append(f"  {v.key:<{width}s}  " + "  ".join(
                f"{'-' if math.isnan(c) else f'{c:.4f}':>{max(8, len(n))}s}" for c, n in zip(cells, names))
                + (f"  ({why})" if why else ""))
        return "\n".join(lines)

    def format_curves(self) -> str:
        """The perturbation table as text."""
        best_del, best_ins = self.best()
        head = f"{self.source}: target {self.target_words()}, {self.steps} steps, {self.baseline} baseline"
        width = max([len(v.key) for v in self.views] + [len(random_row_name(self.random_deletion))])
        lines = [head, f"  {'view':<{width}s}  {'deletion AUC (lower is better)':>31s}  "
                       f"{'insertion AUC (higher is better)':>33s}"]
        for v in self.views:
            if v.unavailable:
                lines.append(f"  {v.key:<{width}s}  {'-':>31s}  {'-':>33s}  ({v.unavailable})")
                continue
            d = f"{v.deletion_auc:.4f}" + ("*" if v.key == best_del else " ")
            i = f"{v.insertion_auc:.4f}" + ("*" if v.key == best_ins else " ")
            lines.append(f"  {v.key:<{width}s}  {d:>31s}  {i:>33s}")
        rd, ri = self.random_deletion, self.random_insertion
        lines.append(f"  {random_row_name(rd):<{width}s}  {f'{rd.auc_mean:.4f} +- {rd.auc_std:.4f} ':>31s}  "
                     f"{f'{ri.auc_mean:.4f} +- {ri.auc_std:.4f} ':>33s}")
        return "\n".join(lines)


def random_row_name(r: RandomBaseline) -> str:
    """The random row's name in the text tables, e.g. ``random (10 seeds)``."""
    return f"random ({r.seeds} seed{'s' if r.seeds != 1 else ''})"

