"""Benchmark and reference numbers of vitviz.evaluate (faithfulness), peers measured in the same process.

(a) Speed (issue 13's target): one full deletion + insertion pair of perturbation curves (20 steps, mean baseline)
    for one map of a ViT-B/16 image at 224 px, against the floor: 42 plain batched forwards (2 x 21 perturbed images)
    of torchvision's ``vit_b_16`` run on the very same inputs in the same batches. Both models carry the same random
    weights (torchvision's, converted by ``load_checkpoint``), so the scores must agree too. Interleaved rounds; also
    our own plain forward of those batches, which splits the ratio into "our ViT vs torchvision's" and "the
    evaluation's own overhead" (masking, batching, softmax). Target: pair / torchvision <= 1.2.
(b) The bundled demo model on N held-out shape images (the ``"test"`` stream, which training never draws from; default
    100): the table of ``evaluate_views`` (last-layer [CLS] attention, rollout, gradient rollout, relevance, LeGrad,
    GradCAM; deletion and insertion AUC; random baseline with 10 rankings) averaged over the images; issue 13's
    criteria (relevance's deletion AUC below the random mean - 2 std, its insertion AUC above the random mean + 2 std;
    the std over the rankings of the image-averaged AUC, and per image); and the cascading randomisation check of
    relevance.
(c) ViT-Ti/16 (augreg, ``../shared/weights``; skipped when absent) on scikit-image's chelsea, coffee, astronaut and
    rocket: the table of each photo (the default views: last-layer [CLS] attention, rollout, gradient rollout,
    relevance, LeGrad, GradCAM) and the mean; then LeGrad's and GradCAM's other settings on the same photos and target
    (LeGrad pooled by the model's own [CLS] instead of the official mean of all tokens, LeGrad summed from layer 0
    instead of the last two layers, GradCAM on the second-to-last block), against the same random rankings.

Usage: ``python bench/evaluate.py [--only a|b|c] [--reps 5] [--images 100] [--baseline mean|blur|noise]
[--threads N]``. Absolute times on shared machines are noise; read the ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from vitviz import evaluate as E  # noqa: E402
from vitviz.evaluate.checks import check_saliency  # noqa: E402
from vitviz.evaluate.perturbation import Perturber  # noqa: E402

TINY = REPO.parent / "shared" / "weights" / "vit_tiny_patch16_224_augreg_in21k_ft_in1k.safetensors"


def _median_ms(ts: list[float]) -> float:
    return statistics.median(ts) * 1e3


def bench_speed(reps: int, steps: int = 20) -> None:
    import torchvision

    from vitviz import analysis as A
    from vitviz.capture import capture
    from vitviz.model import load_checkpoint

    torch.manual_seed(0)
    tv = torchvision.models.vit_b_16(weights=None).eval()
    with torch.no_grad():  # torchvision zero-initialises the head: randomise it so the scores mean something
        torch.nn.init.normal_(tv.heads.head.weight, std=0.02)
        torch.nn.init.normal_(tv.heads.head.bias, std=0.02)
    ours = load_checkpoint(tv.state_dict(), num_heads=12).eval()
    x = torch.randn(3, 224, 224)
    t0 = time.perf_counter()
    cap = capture(ours, x[None], target="top")
    t_cap = time.perf_counter() - t0
    target = int(cap.targets[0])
    im = cap.image(0)
    sal = A.relevance(im.attentions, im.attention_grads, grid=im.grid, num_prefix_tokens=im.num_prefix_tokens)

    # the very inputs of the two curves, in the curves' own batches
    p = Perturber(ours, x, target=target, baseline="mean", patch_size=None, seed=0, batch_size=None)
    s = check_saliency(sal, p.grid)
    batches = []
    for mode in ("deletion", "insertion"):
        masks, _ = p.curve_masks(s, mode, steps)
        (gh, gw), (ph, pw) = p.grid, p.patch
        m = torch.from_numpy(masks).view(-1, 1, gh, 1, gw, 1).expand(-1, 1, gh, ph, gw, pw)
        m = m.reshape(-1, 1, gh * ph, gw * pw)
        imgs = torch.where(m, p.base, p.x)
        batches += list(imgs.split(p.batch_size))
    n_images = sum(b.shape[0] for b in batches)

    def run_pair():
        d = E.perturbation_curve(ours, x, sal, target=target, mode="deletion", steps=steps)
        i = E.perturbation_curve(ours, x, sal, target=target, mode="insertion", steps=steps)
        return d, i

    def run_tv():
        with torch.inference_mode():
            return [tv(b).float().softmax(-1)[:, target] for b in batches]

    def run_ours_plain():
        with torch.inference_mode():
            return [ours(b).float().softmax(-1)[:, target] for b in batches]

    d, i = run_pair()
    ref = torch.cat(run_tv()).double().numpy()
    got = np.concatenate([d.scores, i.scores])
    print(f"(a) ViT-B/16 224 px, fp32, {torch.get_num_threads()} thread(s); one pair = {n_images} perturbed images in "
          f"batches of {[b.shape[0] for b in batches]} (auto batch size {p.batch_size}); target class {target}")
    print(f"    same weights: max |score(pair) - score(torchvision)| = {np.abs(got - ref).max():.2e}; "
          f"deletion AUC {d.auc:.4f}, insertion AUC {i.auc:.4f}")
    runs = {"deletion+insertion pair": run_pair, "torchvision 42 forwards": run_tv,
            "our ViT 42 plain forwards": run_ours_plain}
    for f in runs.values():  # warm-up
        f()
    wall: dict[str, list[float]] = {k: [] for k in runs}
    cpu: dict[str, list[float]] = {k: [] for k in runs}
    ratios: dict[str, list[float]] = {k: [] for k in runs}
    names = list(runs)
    for r in range(reps):
        this = {}
        for name in (names if r % 2 == 0 else names[::-1]):  # interleaved, order alternating
            t, c = time.perf_counter(), time.process_time()
            runs[name]()
            cpu[name].append(time.process_time() - c)
            this[name] = time.perf_counter() - t
            wall[name].append(this[name])
        for name in runs:
            ratios[name].append(this[name] / this["torchvision 42 forwards"])
    base = "torchvision 42 forwards"
    print(f"    {reps} interleaved rounds (median wall, median of per-round ratios to torchvision, ratio of median "
          "process CPU times)")
    for name in runs:
        print(f"    {name:27s} {_median_ms(wall[name]):9.0f} ms   ratio {statistics.median(ratios[name]):.3f}   "
              f"cpu ratio {statistics.median(cpu[name]) / statistics.median(cpu[base]):.3f}")
    pair = statistics.median(ratios["deletion+insertion pair"])
    plain = statistics.median(ratios["our ViT 42 plain forwards"])
    print(f"    pair / torchvision = {pair:.3f} (target <= 1.2) = our forward vs torchvision's {plain:.3f} x "
          f"the evaluation's overhead {pair / plain:.3f}")
    print(f"    for context: the capture with gradients that made the map took {t_cap * 1e3:.0f} ms (once)")


def _demo_tables(n: int, baseline: str, seeds: int = 10, steps: int = 20):
    from vitviz.demo import generate, load_demo_model
    from vitviz.pipeline import Pipeline

    pipe = Pipeline(load_demo_model())
    tables = []
    for k in range(n):
        tables.append(E.evaluate_views(pipe, generate(k, seed=0, stream="test").pil(), steps=steps,
                                       baseline=baseline, seeds=seeds))
    return pipe, tables


def criteria(tables, key: str = "relevance") -> dict[str, float]:
    """Issue 13's test on a set of tables: relevance's mean AUCs against the random baseline's mean +- 2 std (std over
    the rankings of the image-averaged AUC), and the share of images where it holds image by image."""
    means = E.mean_over_images(tables)
    d, i, _, _ = means[key]
    rd, ri, sd, si = means["random"]
    per_del = np.mean([t.views[[v.key for v in t.views].index(key)].deletion_auc
                       < t.random_deletion.auc_mean - 2 * t.random_deletion.auc_std for t in tables])
    per_ins = np.mean([t.views[[v.key for v in t.views].index(key)].insertion_auc
                       > t.random_insertion.auc_mean + 2 * t.random_insertion.auc_std for t in tables])
    return dict(deletion=d, insertion=i, random_deletion=rd, random_insertion=ri, std_deletion=sd,
                std_insertion=si, per_image_deletion=float(per_del), per_image_insertion=float(per_ins))


def print_mean_table(tables, title: str) -> None:
    means = E.mean_over_images(tables)
    print(f"    {title}")
    print("    | view | deletion AUC (lower is better) | insertion AUC (higher is better) |")
    print("    |---|---|---|")
    for k, (d, i, sd, si) in means.items():
        if k == "random":
            print(f"    | random ({tables[0].random_deletion.seeds} rankings) | {d:.3f} +- {sd:.3f} | "
                  f"{i:.3f} +- {si:.3f} |")
        else:
            print(f"    | {k} | {d:.3f} | {i:.3f} |")


def bench_demo(n: int, baseline: str) -> None:
    from vitviz.demo import generate

    t = time.perf_counter()
    pipe, tables = _demo_tables(n, baseline)
    dt = time.perf_counter() - t
    print(f"(b) demo model, {n} held-out images, 20 steps, {baseline} baseline, 10 random rankings: "
          f"{dt:.0f} s ({dt / n:.2f} s per image, {len(tables[0].views)} views)")
    print_mean_table(tables, f"mean over {n} images")
    c = criteria(tables)
    print(f"    relevance deletion {c['deletion']:.3f} vs random {c['random_deletion']:.3f} - 2 x "
          f"{c['std_deletion']:.3f} = {c['random_deletion'] - 2 * c['std_deletion']:.3f}: "
          f"{'PASS' if c['deletion'] < c['random_deletion'] - 2 * c['std_deletion'] else 'FAIL'}; "
          f"image by image {100 * c['per_image_deletion']:.0f}% of images")
    print(f"    relevance insertion {c['insertion']:.3f} vs random {c['random_insertion']:.3f} + 2 x "
          f"{c['std_insertion']:.3f} = {c['random_insertion'] + 2 * c['std_insertion']:.3f}: "
          f"{'PASS' if c['insertion'] > c['random_insertion'] + 2 * c['std_insertion'] else 'FAIL'}; "
          f"image by image {100 * c['per_image_insertion']:.0f}% of images")
    for k in ("cls_last", "rollout", "grad_rollout", "legrad", "gradcam"):
        ck = criteria(tables, k)
        print(f"    {k}: deletion {ck['deletion']:.3f} (images below random - 2 std: "
              f"{100 * ck['per_image_deletion']:.0f}%), insertion {ck['insertion']:.3f} (above random + 2 std: "
              f"{100 * ck['per_image_insertion']:.0f}%)")
    m = min(n, 20)
    t = time.perf_counter()
    rhos = []
    for k in range(m):
        x, _ = pipe.spec.preprocess.apply(generate(k, seed=0, stream="test").pil())
        rhos.append(E.randomisation_check(pipe.model, x, "relevance", target=tables[k].target).correlations)
    rhos = np.stack(rhos)
    print(f"    randomisation check of relevance on {m} images ({time.perf_counter() - t:.0f} s): Spearman after "
          f"randomising the top 1..{rhos.shape[1]} blocks, mean {np.round(rhos.mean(0), 3).tolist()}, "
          f"max {np.round(rhos.max(0), 3).tolist()}")


VARIANTS = (  # (row name, view, option changes): LeGrad's and GradCAM's settings other than the defaults
    ("legrad [CLS] pooling", "legrad", {"legrad_pooling": "model"}),
    ("legrad from layer 0", "legrad", {"legrad_start": 0}),
    ("gradcam block L-2", "gradcam", {"gradcam_layer": -2}),
)


def variant_aucs(pipe, img, target: int, baseline: str, steps: int = 20) -> dict[str, tuple[float, float]]:
    """Deletion and insertion AUCs of :data:`VARIANTS` for one photo and class (one capture with both LeGrad
    poolings)."""
    from dataclasses import replace

    from vitviz import views
    from vitviz.views.options import ViewOptions

    r = pipe.run_batch([img], target=target, legrad=("mean", "model"))[0]
    x, _ = pipe.spec.preprocess.apply(img)
    out = {}
    for name, key, changes in VARIANTS:
        m = views.get(key).compute(r, replace(ViewOptions(view=key), **changes))
        d, i = (E.perturbation_curve(pipe.model, x, m, target=target, mode=mode, steps=steps, baseline=baseline)
                for mode in ("deletion", "insertion"))
        out[name] = (d.auc, i.auc)
    return out


def bench_real(baseline: str) -> None:
    if not TINY.is_file():
        print(f"(c) skipped: {TINY} is absent")
        return
    from PIL import Image
    from skimage import data

    from vitviz.model import load_checkpoint
    from vitviz.model.spec import inception_preprocess
    from vitviz.pipeline import Pipeline

    m = load_checkpoint(TINY)
    m.spec = m.spec.replace(preprocess=inception_preprocess(224), name="ViT-Ti/16 augreg")
    pipe = Pipeline(m)
    tables, variants = [], []
    t = time.perf_counter()
    photos = ("chelsea", "coffee", "astronaut", "rocket")
    for name in photos:
        img = Image.fromarray(getattr(data, name)()).convert("RGB")
        tab = E.evaluate_views(pipe, img, baseline=baseline)
        tab.source = name
        tables.append(tab)
        print("    " + tab.format().replace("\n", "\n    "))
    print(f"(c) ViT-Ti/16 augreg, 4 photos, {baseline} baseline: {time.perf_counter() - t:.0f} s")
    print_mean_table(tables, "mean over the 4 photos")
    t = time.perf_counter()
    for name, tab in zip(photos, tables):
        img = Image.fromarray(getattr(data, name)()).convert("RGB")
        variants.append(variant_aucs(pipe, img, int(tab.target), baseline))
    print(f"    LeGrad's and GradCAM's other settings ({time.perf_counter() - t:.0f} s): deletion / insertion AUC per "
          f"photo ({', '.join(photos)}), then the mean")
    for row, _key, _changes in VARIANTS:
        cells = [f"{v[row][0]:.3f} / {v[row][1]:.3f}" for v in variants]
        mean = np.mean([v[row] for v in variants], axis=0)
        print(f"    | {row} | {' | '.join(cells)} | {mean[0]:.3f} / {mean[1]:.3f} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", choices=["a", "b", "c"], default=None)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--images", type=int, default=100)
    ap.add_argument("--baseline", choices=E.BASELINES, default="mean")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.only in (None, "a"):
        bench_speed(args.reps)
    if args.only in (None, "b"):
        bench_demo(args.images, args.baseline)
    if args.only in (None, "c"):
        bench_real(args.baseline)


if __name__ == "__main__":
    main()
