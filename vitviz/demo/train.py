"""Train the bundled shapes demo model: ``python -m vitviz.demo.train``.

A small :class:`~vitviz.model.ViT` (112 px input, patch 8: a 14 x 14 grid like ViT-B/16 at 224) is trained from
scratch on an endless stream of freshly generated :mod:`vitviz.demo.shapes` images: step ``s`` sees images
``s*B .. s*B+B-1`` of the ``"train"`` stream, so every batch is class-balanced and a run is reproducible from its
``--seed``. AdamW, linear warmup then cosine decay, label smoothing, and batch augmentation (flips, 90-degree
rotations, channel permutation, brightness/contrast jitter). Progress is printed every ``--log-every`` steps with
the accuracy on a fixed validation set (the ``"val"`` stream, never used for training).

No Qt here.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F

from vitviz.demo.shapes import BASE, CLASSES, generate_batch
from vitviz.model.spec import ModelSpec
from vitviz.model.vit import ViT
from vitviz.preprocess import INCEPTION_MEAN, INCEPTION_STD, Preprocess

DEMO_NAME = "vitviz shapes demo (ViT 112/8)"


def demo_preprocess() -> Preprocess:
    """The demo model's preprocessing: shorter side to 112 (bicubic), centre crop 112 x 112, mean = std = 0.5."""
    return Preprocess(resize=BASE, crop=(BASE, BASE), interpolation="bicubic", mean=INCEPTION_MEAN, std=INCEPTION_STD)


def build_model(embed_dim: int = 128, depth: int = 6, num_heads: int = 4, patch_size: int = 8,
                img_size: int = BASE, drop_path_rate: float = 0.0) -> ViT:
    """The demo architecture with random weights and its spec (labels = :data:`CLASSES`)."""
    model = ViT(img_size=img_size, patch_size=patch_size, num_classes=len(CLASSES), embed_dim=embed_dim,
                depth=depth, num_heads=num_heads, drop_path_rate=drop_path_rate)
    pre = demo_preprocess() if img_size == BASE else Preprocess(
        resize=img_size, crop=(img_size, img_size), interpolation="bicubic", mean=INCEPTION_MEAN, std=INCEPTION_STD)
    model.spec = ModelSpec(config=model.config, preprocess=pre, labels=CLASSES, source_format="native",
                           source_path=None, name=DEMO_NAME)
    return model


def to_input(images: np.ndarray, preprocess: Preprocess) -> torch.Tensor:
    """``uint8 [B, H, W, 3]`` at the model's input size -> normalised ``float32 [B, 3, H, W]``.

    Equal to ``preprocess`` applied to each image when the images are already ``preprocess.crop`` in size
    (resize and crop are then the identity).
    """
    x = torch.from_numpy(images).permute(0, 3, 1, 2).float().div_(255.0)
    mean = torch.tensor(preprocess.mean).view(1, -1, 1, 1)
    std = torch.tensor(preprocess.std).view(1, -1, 1, 1)
    return (x - mean) / std


def augment(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Batch augmentation on ``[B, 3, H, W]`` images in [0, 1]: flips, 90-degree turns, channel order, jitter."""
    B = x.shape[0]
    flip = torch.rand(B, generator=gen) < 0.5
    x = torch.where(flip.view(B, 1, 1, 1), x.flip(-1), x)
    k = torch.randint(0, 4, (B,), generator=gen)
    if x.shape[-1] == x.shape[-2]:
        x = torch.stack([torch.rot90(xi, int(ki), dims=(-2, -1)) for xi, ki in zip(x, k)])
    perm = torch.stack([torch.randperm(3, generator=gen) for _ in range(B)])
    x = torch.gather(x, 1, perm.view(B, 3, 1, 1).expand_as(x))
    bright = 1 + (torch.rand(B, 1, 1, 1, generator=gen) - 0.5) * 0.4
    contrast = 1 + (torch.rand(B, 1, 1, 1, generator=gen) - 0.5) * 0.4
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    x = ((x - mean) * contrast + mean) * bright
    return x.clamp_(0, 1)


def lr_at(step: int, total: int, base_lr: float, warmup: int, min_ratio: float = 0.01) -> float:
    """Linear warmup for ``warmup`` steps, then cosine decay to ``min_ratio * base_lr`` at ``total``."""
    if step < warmup:
        return base_lr * (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    return base_lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(t, 1.0))))


def clutter_at(step: int, total: int, curriculum: float, start: float = 0.0) -> float:
    """Background clutter of training step ``step``: linear from ``start`` to 1 over the first ``curriculum`` part."""
    ramp = curriculum * total
    if ramp <= 0 or step >= ramp:
        return 1.0
    return float(min(1.0, max(0.0, start + (1.0 - start) * step / ramp)))


@torch.no_grad()
def evaluate(model: ViT, images: np.ndarray, labels: np.ndarray, batch_size: int = 100) -> float:
    """Top-1 accuracy on ``uint8 [N, H, W, 3]`` images."""
    was_training = model.training
    model.eval()
    correct = 0
    for i in range(0, len(images), batch_size):
        x = to_input(images[i:i + batch_size], model.spec.preprocess)
        correct += int((model(x).argmax(-1).numpy() == labels[i:i + batch_size]).sum())
    model.train(was_training)
    return correct / max(1, len(images))


def save(model: ViT, path: Path) -> None:
    from vitviz.model import save_checkpoint

    try:
        save_checkpoint(model, path, overwrite=True)
    except NotImplementedError:  # TEMPORARY until the engine's save_checkpoint lands
        from safetensors.torch import save_file

        sd = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
        save_file(sd, str(path), metadata={"vitviz_spec": model.spec.to_json()})


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m vitviz.demo.train", description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=3000, help="optimizer steps (default 3000)")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate")
    p.add_argument("--weight-decay", type=float, default=0.05)
    p.add_argument("--warmup", type=float, default=0.05, help="warmup steps as a fraction of --steps")
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument("--embed-dim", type=int, default=128)
    p.add_argument("--depth", type=int, default=6)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--drop-path", type=float, default=0.0)
    p.add_argument("--img-size", type=int, default=BASE)
    p.add_argument("--curriculum", type=float, default=0.3,
                   help="fraction of --steps over which the background clutter ramps from --clutter-start to 1")
    p.add_argument("--clutter-start", type=float, default=0.0)
    p.add_argument("--low-res", type=int, default=56,
                   help="progressive resizing: image side of the first --low-res-frac of the steps (0: off)")
    p.add_argument("--low-res-frac", type=float, default=0.5)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    p.add_argument("--val-size", type=int, default=400)
    p.add_argument("--log-every", type=int, default=100)
    p.add_argument("--out", type=Path, default=None,
                   help="output .safetensors (default: resources/demo/shapes_vit.safetensors in the repository)")
    p.add_argument("--force", action="store_true", help="overwrite --out if it exists")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.out is None:
        from vitviz.demo import default_model_path

        args.out = default_model_path()
    out = Path(args.out)
    if out.exists() and not args.force:
        print(f"error: {out} exists; pass --force to overwrite it", file=sys.stderr)
        return 2
    if out.suffix != ".safetensors":
        print(f"error: {out}: the output must be a .safetensors file", file=sys.stderr)
        return 2
    if args.low_res % 8 or args.img_size % 8:
        print(f"error: --img-size {args.img_size} and --low-res {args.low_res} must be multiples of the patch size 8",
              file=sys.stderr)
        return 2
    if args.steps < 1 or args.batch_size < 1:
        print("error: --steps and --batch-size must be positive", file=sys.stderr)
        return 2
    torch.set_num_threads(max(1, args.threads))
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    size = (args.img_size, args.img_size)

    model = build_model(args.embed_dim, args.depth, args.heads, img_size=args.img_size,
                        drop_path_rate=args.drop_path)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {model.spec.name}: dim {args.embed_dim}, depth {args.depth}, heads {args.heads}, "
          f"{n_params / 1e6:.2f} M parameters; {args.steps} steps x {args.batch_size} images", flush=True)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "pos_embed" not in n and "token" not in n]
    no_decay = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "pos_embed" not in n
                                                                and "token" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.999))
    warmup = max(1, int(round(args.warmup * args.steps)))
    val_x, val_y, _ = generate_batch(0, args.val_size, seed=args.seed, stream="val", size=size)

    t0 = time.perf_counter()
    model.train()
    run_loss, run_acc, run_n = 0.0, 0.0, 0
    for step in range(args.steps):
        clutter = clutter_at(step, args.steps, args.curriculum, args.clutter_start)
        side = args.low_res if args.low_res and step < args.low_res_frac * args.steps else args.img_size
        imgs, labels, _ = generate_batch(step * args.batch_size, args.batch_size, seed=args.seed, stream="train",
                                         size=(side, side), clutter=clutter)
        x = torch.from_numpy(imgs).permute(0, 3, 1, 2).float().div_(255.0)
        x = augment(x, gen)
        pre = model.spec.preprocess
        x = (x - torch.tensor(pre.mean).view(1, 3, 1, 1)) / torch.tensor(pre.std).view(1, 3, 1, 1)
        y = torch.from_numpy(labels)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps, args.lr, warmup)
        logits = model(x)
        loss = F.cross_entropy(logits, y, label_smoothing=args.label_smoothing)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        run_loss += loss.item() * len(y)
        run_acc += float((logits.argmax(-1) == y).float().sum())
        run_n += len(y)
        if (step + 1) % args.log_every == 0 or step + 1 == args.steps:
            el = time.perf_counter() - t0
            val = evaluate(model, val_x, val_y) if args.val_size else float("nan")
            print(f"step {step + 1:5d}/{args.steps}  lr {opt.param_groups[0]['lr']:.2e}  "
                  f"{side}px  clutter {clutter:.2f}  loss {run_loss / run_n:.4f}  train acc {run_acc / run_n:.3f}  val acc {val:.3f}  "
                  f"elapsed {el / 60:.1f} min  eta {(args.steps - step - 1) * el / (step + 1) / 60:.1f} min",
                  flush=True)
            run_loss, run_acc, run_n = 0.0, 0.0, 0
    model.eval()
    elapsed = time.perf_counter() - t0
    out.parent.mkdir(parents=True, exist_ok=True)
    save(model, out)
    val = evaluate(model, val_x, val_y) if args.val_size else float("nan")
    print(f"done in {elapsed / 60:.1f} min; validation accuracy {val:.4f}; saved {out} "
          f"({out.stat().st_size / 1e6:.2f} MB)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
