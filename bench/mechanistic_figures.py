"""The figures of docs/mechanistic.md: the logit lens against depth, the head knock-out grid and an activation
patching map, of the real ViT-Ti/16 (``../shared/weights/vit_tiny_patch16_224_augreg_in21k_ft_in1k.safetensors``)
on scikit-image's ``chelsea`` (patching: chelsea into ``coffee``). Prints the numbers the page quotes.

Usage: ``python bench/mechanistic_figures.py [--out docs/images] [--model PATH] [--threads 2]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from vitviz.capture.mechanistic import activation_patching, head_knockout, logit_lens  # noqa: E402

TINY = REPO.parent / "shared" / "weights" / "vit_tiny_patch16_224_augreg_in21k_ft_in1k.safetensors"


def lens_figure(lens, out: Path, plt) -> None:
    L = lens.num_layers
    final = lens.probabilities[-1].topk(3).indices.tolist()
    fig, ax = plt.subplots(figsize=(7.0, 3.6), dpi=100)
    layers = np.arange(L)
    for c in final:
        ax.plot(layers, lens.probabilities[:, c].numpy(), marker="o", label=lens.label(c))
    for l in range(L):  # the top class at each depth, written above the axis
        top = int(lens.probabilities[l].argmax())
        ax.annotate(lens.label(top).split(",")[0][:14], (l, 1.02), rotation=60, fontsize=7, ha="left",
                    va="bottom", annotation_clip=False)
    ax.set_ylim(0, 1)
    ax.set_xticks(layers)
    ax.set_xlabel("layer (output of block; 0 = after the first block)")
    ax.set_ylabel("probability (softmax of the head)")
    ax.set_title("Logit lens, ViT-Ti/16 on chelsea: the final top-3 classes against depth\n"
                 "(rotated labels: the top class read at each layer)", fontsize=9, pad=62)
    ax.legend(fontsize=8, loc="center left")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    plt.close(fig)


def knockout_figure(results, out: Path, plt) -> None:
    fig, axes = plt.subplots(1, len(results), figsize=(3.2 * len(results) + 1, 4.6), dpi=100)
    vmax = max(float(r.delta.abs().max()) for r in results)
    for ax, r in zip(np.atleast_1d(axes), results):
        im = ax.imshow(r.delta.numpy(), cmap="RdBu", vmin=-vmax, vmax=vmax, aspect="auto")
        ax.set_xticks(range(r.delta.shape[1]))
        ax.set_yticks(range(r.delta.shape[0]))
        ax.set_xlabel("head")
        ax.set_ylabel("layer")
        ax.set_title(f"--mode {r.mode}", fontsize=9)
    bar = fig.colorbar(im, ax=list(np.atleast_1d(axes)))
    bar.set_label(f"Δ logit of '{results[0].target_text}' (head removed − clean {results[0].clean:.2f})")
    fig.suptitle("Head knock-out, ViT-Ti/16 on chelsea", fontsize=10)
    fig.savefig(out, dpi=100)
    plt.close(fig)


def patching_figure(result, corrupt_rgb: np.ndarray, out: Path, plt, layers=(0, 3, 6, 9, 11)) -> None:
    fig = plt.figure(figsize=(11, 4.4), dpi=100)
    gs = fig.add_gridspec(2, len(layers), height_ratios=[1.1, 1])
    ax = fig.add_subplot(gs[0, :])
    L = result.num_layers
    ax.plot(range(L), result.cls.numpy(), marker="o", label="[CLS] token patched")
    ax.plot(range(L), result.all.numpy(), marker="s", label="all tokens patched")
    ax.plot(range(L), result.patches.sum(1).numpy(), marker="^", label="sum of single-patch recoveries")
    ax.axhline(0, color="grey", lw=0.5)
    ax.set_xticks(range(L))
    ax.set_xlabel("layer whose output is patched")
    ax.set_ylabel("recovered share")
    ax.legend(fontsize=8)
    ax.set_title(f"Activation patching, ViT-Ti/16, chelsea (clean) into coffee (corrupt); target "
                 f"'{result.target_text}' (logit {result.clean:.2f} clean, {result.corrupt:.2f} corrupt)", fontsize=9)
    vmax = max(float(result.patches[list(layers)].abs().max()), 1e-6)
    for i, l in enumerate(layers):
        a = fig.add_subplot(gs[1, i])
        a.imshow(corrupt_rgb, extent=(0, result.grid[1], result.grid[0], 0))
        im = a.imshow(result.recovery_map(l).numpy(), cmap="RdBu_r", vmin=-vmax, vmax=vmax, alpha=0.75,
                      extent=(0, result.grid[1], result.grid[0], 0))
        a.set_title(f"layer {l}", fontsize=8)
        a.axis("off")
    bar = fig.colorbar(im, ax=fig.axes[1:], fraction=0.02)
    bar.set_label("recovered share, one patch", fontsize=8)
    fig.subplots_adjust(left=0.06, right=0.9, top=0.92, bottom=0.03, hspace=0.45)
    fig.savefig(out, dpi=100)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(REPO / "docs" / "images"))
    ap.add_argument("--model", default=str(TINY))
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from PIL import Image
    from skimage import data

    from vitviz.pipeline import Pipeline

    pipeline = Pipeline.open(args.model, precision="fp32")
    chelsea, coffee = (Image.fromarray(getattr(data, n)()).convert("RGB") for n in ("chelsea", "coffee"))
    pc, pk = pipeline.prepare(chelsea), pipeline.prepare(coffee)
    model = pipeline.model
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    lens = logit_lens(model, pc.x[None])
    print(f"target {lens.target_text} (class {lens.target.index})")
    for l in range(lens.num_layers):
        top = int(lens.probabilities[l].argmax())
        print(f"  lens layer {l:2d}: p(target) {float(lens.target_probability[l]):.3f}; top {lens.label(top)} "
              f"{float(lens.probabilities[l, top]):.3f}")
    lens_figure(lens, out / "mechanistic_lens.png", plt)

    kos = [head_knockout(model, pc.x[None], mode=m) for m in ("zero", "mean")]
    for r in kos:
        d = r.delta
        i = int(d.argmin())
        print(f"  knock-out {r.mode}: clean {r.clean:.3f}; largest drop {float(d.min()):.3f} at layer "
              f"{i // d.shape[1]} head {i % d.shape[1]}; largest rise {float(d.max()):.3f}; "
              f"|delta| > 0.5: {int((d.abs() > 0.5).sum())} of {d.numel()}")
    knockout_figure(kos, out / "mechanistic_knockout.png", plt)

    patch = activation_patching(model, pc.x[None], pk.x[None])
    print(f"  patching: clean {patch.clean:.3f}, corrupt {patch.corrupt:.3f}")
    for l in range(patch.num_layers):
        m = patch.patches[l]
        j = int(m.argmax())
        print(f"  patch layer {l:2d}: cls {float(patch.cls[l]):.3f} all {float(patch.all[l]):.3f} "
              f"best patch {j // patch.grid[1]},{j % patch.grid[1]} {float(m.max()):.3f} sum {float(m.sum()):.3f}")
    y0, x0, y1, x1 = pk.geometry.crop_in_image()  # the corrupted image as the model saw it
    rgb = pk.rgb[int(round(y0)):int(round(y1)), int(round(x0)):int(round(x1))]
    patching_figure(patch, rgb, out / "mechanistic_patching.png", plt)
    for f in sorted(out.glob("mechanistic_*.png")):
        print(f"wrote {f} ({f.stat().st_size // 1024} kB)")


if __name__ == "__main__":
    main()
