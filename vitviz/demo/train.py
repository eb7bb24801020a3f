"""Train the bundled shapes demo model: ``python -m vitviz.demo.train``.

A small :class:`~vitviz.model.ViT` (112 px input, patch 8: a 14 x 14 grid like ViT-B/16 at 224) is trained from
scratch on an endless stream of freshly generated :mod:`vitviz.demo.shapes` images: step ``s`` sees images
``s*B .. s*B+B-1`` of the ``"train"`` stream, so every batch is class-balanced, no image is seen twice, and a run is
reproducible from its ``--seed`` (at a fixed ``--threads``).

The recipe: AdamW (weight decay on matrices only), linear warmup then cosine decay, label smoothing, gradient
clipping; batch augmentation (horizontal flips, channel permutation, brightness/contrast jitter); a curriculum
that starts with bigger objects on plainer backgrounds and reaches the full distribution after ``--curriculum`` of
the steps; progressive resizing (the first ``--low-res-frac`` of the steps at ``--low-res`` px, where the model's
position embeddings are resampled, then 112 px); and a dense auxiliary loss (``--dense-labels``, in the spirit of
token labelling, Jiang et al. 2021): every patch token predicts "object class or background" through a separate
linear head that is thrown away after training. Without it a small ViT sits at chance level for many hundreds of
steps on this data. The [CLS] token, whose attention the app visualises, is trained by the ordinary
classification loss only. ``--init-from`` continues from a checkpoint (a second, full-resolution stage).

Progress is printed every ``--log-every`` steps with the accuracy on a fixed validation set (the ``"val"`` stream,
never used for training). On a machine shared with other jobs, ``--threads 1`` is much faster than 2.

No Qt here.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from concurrent.futures import ThreadPoolExecutor
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
                img_size: int = BASE, drop_path_rate: float = 0.0, pos_embed: str = "learned") -> ViT:
    """The demo architecture with random weights and its spec (labels = :data:`CLASSES`)."""
    model = ViT(img_size=img_size, patch_size=patch_size, num_classes=len(CLASSES), embed_dim=embed_dim,
                depth=depth, num_heads=num_heads, drop_path_rate=drop_path_rate,
                pos_embed=pos_embed)  # type: ignore[arg-type]
    pre = demo_preprocess() if img_size == BASE else Preprocess(
        resize=img_size, crop=(img_size, img_size), interpolation="bicubic", mean=INCEPTION_MEAN, std=INCEPTION_STD)
    model.spec = ModelSpec(config=model.config, preprocess=pre, labels=CLASSES, source_format="native",
                           source_path=None, name=DEMO_NAME)
    return model


@torch.no_grad()
def mimetic_init_(model: ViT, alpha: float = 0.7, beta: float = 0.7, gen: torch.Generator | None = None) -> None:
    """Mimetic initialisation of the query/key weights (Trockman & Kolter 2023).

    Sets ``W_q^T W_k = alpha Z + beta I`` (``Z ~ N(0, 1/D)``) in every block, so that at initialisation a token
    attends to tokens similar to itself; with sin-cos position embeddings that means its neighbours, a
    convolution-like start that trains much faster on small data than uniform attention.
    """
    for blk in model.blocks:
        w = blk.attn.qkv.weight  # [3D, D]: rows q (heads in order), k, v
        D = w.shape[1]
        Z = torch.randn(D, D, generator=gen) / math.sqrt(D)
        U, S, Vh = torch.linalg.svd(alpha * Z + beta * torch.eye(D))
        root = S.sqrt()[:, None]
        w[:D] = root * U.T
        w[D:2 * D] = root * Vh


@torch.no_grad()
def jax_init_(model: ViT, gen: torch.Generator | None = None) -> None:
    """The original (JAX) ViT initialisation: Xavier-uniform linear layers, LeCun-normal patch embedding, zero head.

    timm's default (truncated normal, std 0.02) suits wide models; for a 64-192 wide model it leaves every MLP in the
    near-linear range of GELU at the start, and training sits at chance level for hundreds of steps.
    """
    for name, m in model.named_modules():
        if isinstance(m, torch.nn.Linear):
            if name == "head":
                torch.nn.init.zeros_(m.weight)
            else:
                bound = math.sqrt(6.0 / (m.in_features + m.out_features))
                m.weight.copy_(torch.rand(m.weight.shape, generator=gen) * 2 * bound - bound)
            if m.bias is not None:
                torch.nn.init.zeros_(m.bias)
    w = model.patch_embed.proj.weight
    fan_in = w[0].numel()
    w.copy_(torch.randn(w.shape, generator=gen) / math.sqrt(fan_in))


def to_input(images: np.ndarray, preprocess: Preprocess) -> torch.Tensor:
    """``uint8 [B, H, W, 3]`` at the model's input size -> normalised ``float32 [B, 3, H, W]``.

    Equal to ``preprocess`` applied to each image when the images are already ``preprocess.crop`` in size
    (resize and crop are then the identity).
    """
    x = torch.from_numpy(images).permute(0, 3, 1, 2).float().div_(255.0)
    mean = torch.tensor(preprocess.mean).view(1, -1, 1, 1)
    std = torch.tensor(preprocess.std).view(1, -1, 1, 1)
    return (x - mean) / std


def augment(x: torch.Tensor, gen: torch.Generator, masks: torch.Tensor | None = None, rot90: bool = False):
    """Batch augmentation on ``[B, 3, H, W]`` images in [0, 1]: horizontal flips, channel order, jitter, and with
    ``rot90`` also 90-degree turns (off by default: the generator's objects are near-upright).

    ``masks [B, H, W]`` (optional) get the same flips and turns; then ``(images, masks)`` is returned.
    """
    B = x.shape[0]
    if masks is not None:
        x = torch.cat([x, masks[:, None].to(x.dtype)], dim=1)
    flip = torch.rand(B, generator=gen) < 0.5
    x = torch.where(flip.view(B, 1, 1, 1), x.flip(-1), x)
    k = torch.randint(0, 4, (B,), generator=gen)
    if rot90 and x.shape[-1] == x.shape[-2]:
        x = torch.stack([torch.rot90(xi, int(ki), dims=(-2, -1)) for xi, ki in zip(x, k)])
    if masks is not None:
        x, masks = x[:, :3], x[:, 3]
    perm = torch.stack([torch.randperm(3, generator=gen) for _ in range(B)])
    x = torch.gather(x, 1, perm.view(B, 3, 1, 1).expand_as(x))
    bright = 1 + (torch.rand(B, 1, 1, 1, generator=gen) - 0.5) * 0.4
    contrast = 1 + (torch.rand(B, 1, 1, 1, generator=gen) - 0.5) * 0.4
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    x = ((x - mean) * contrast + mean) * bright
    x = x.clamp_(0, 1)
    return x if masks is None else (x, masks)


def lr_at(step: int, total: int, base_lr: float, warmup: int, min_ratio: float = 0.01) -> float:
    """Linear warmup for ``warmup`` steps, then cosine decay to ``min_ratio * base_lr`` at ``total``."""
    if step < warmup:
        return base_lr * (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    return base_lr * (min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(t, 1.0))))


def dense_label_loss(model: ViT, aux_head: torch.nn.Linear, feats: torch.Tensor, masks: torch.Tensor,
                     labels: torch.Tensor, min_cover: float = 0.25) -> torch.Tensor:
    """Dense auxiliary loss: every patch token predicts, through ``aux_head`` (K+1 outputs, discarded after
    training), the class of the object covering it (``>= min_cover``) or "background" (index K).

    Args:
        model: the ViT.
        aux_head: ``Linear(D, K + 1)``.
        feats: ``[B, N, D]`` final (normed) tokens.
        masks: ``[B, H, W]`` object coverage in [0, 1].
        labels: ``[B]`` classes.

    Returns:
        Scalar cross-entropy averaged over all patch tokens.
    """
    P = model.patch_size
    B, H, W = masks.shape
    cover = masks.reshape(B, H // P, P, W // P, P).mean(dim=(2, 4)).reshape(B, -1)  # [B, gh*gw]
    K = aux_head.out_features - 1
    target = torch.where(cover >= min_cover, labels[:, None], torch.full_like(labels[:, None], K))
    tokens = feats[:, model.num_prefix_tokens:]
    return F.cross_entropy(aux_head(tokens).reshape(-1, K + 1), target.reshape(-1))


def token_label_loss(model: ViT, feats: torch.Tensor, masks: torch.Tensor, labels: torch.Tensor,
                     label_smoothing: float = 0.0, min_cover: float = 0.25) -> torch.Tensor:
    """Token labelling: patch tokens that the object covers (``>= min_cover``) predict its class.

    Args:
        model: the ViT (its ``head`` is shared with the [CLS] classifier).
        feats: ``[B, N, D]`` final (normed) tokens.
        masks: ``[B, H, W]`` object coverage in [0, 1].
        labels: ``[B]`` classes.

    Returns:
        Scalar cross-entropy averaged over the covered patches (0 when none is covered).
    """
    P = model.patch_size
    B, H, W = masks.shape
    cover = masks.reshape(B, H // P, P, W // P, P).mean(dim=(2, 4)).reshape(B, -1)  # [B, gh*gw]
    sel = cover >= min_cover
    if not bool(sel.any()):
        return feats.sum() * 0.0
    tokens = feats[:, model.num_prefix_tokens:][sel]  # [M, D]
    target = labels[:, None].expand_as(sel)[sel]
    return F.cross_entropy(model.head(tokens), target, label_smoothing=label_smoothing)


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
    p.add_argument("--steps", type=int, default=2600, help="optimizer steps")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--lr", type=float, default=7e-4, help="peak learning rate")
    p.add_argument("--weight-decay", type=float, default=0.05)
    p.add_argument("--warmup", type=float, default=0.03, help="warmup steps as a fraction of --steps")
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument("--embed-dim", type=int, default=64)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--drop-path", type=float, default=0.0)
    p.add_argument("--img-size", type=int, default=BASE)
    p.add_argument("--curriculum", type=float, default=0.3,
                   help="fraction of --steps over which the background clutter ramps from --clutter-start to 1")
    p.add_argument("--clutter-start", type=float, default=0.0)
    p.add_argument("--scale-start", type=float, default=1.7,
                   help="object size multiplier at step 0, ramping to 1 over the curriculum (big objects first)")
    p.add_argument("--low-res", type=int, default=56,
                   help="progressive resizing: image side of the first --low-res-frac of the steps (0: off)")
    p.add_argument("--low-res-frac", type=float, default=0.5)
    p.add_argument("--token-labels", type=float, default=0.0,
                   help="weight of the token-labelling loss (Jiang et al. 2021): patch tokens covering the object "
                        "also predict its class through the shared head (0: off)")
    p.add_argument("--pos-embed", choices=("learned", "sincos"), default="learned")
    p.add_argument("--mimetic", action="store_true", help="mimetic query/key initialisation (Trockman & Kolter 2023)")
    p.add_argument("--init", choices=("timm", "jax"), default="timm",
                   help="weight initialisation: timm (normal, std 0.02) or jax (Xavier; the original ViT's)")
    p.add_argument("--dense-labels", type=float, default=1.0,
                   help="weight of a dense auxiliary loss: every patch token predicts object class or background "
                        "through a separate head that is discarded after training (0: off)")
    p.add_argument("--init-from", type=Path, default=None,
                   help="start from this checkpoint's weights (same architecture) instead of random ones")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1,
                   help="torch CPU threads (1 is far faster than 2 on a busy machine; results depend slightly on it)")
    p.add_argument("--val-size", type=int, default=100)
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
                        drop_path_rate=args.drop_path, pos_embed=args.pos_embed)
    if args.init_from is not None:
        from vitviz.model import load_checkpoint

        src = load_checkpoint(args.init_from)
        if src.config != model.config:
            print(f"error: {args.init_from}: architecture {src.config} differs from the requested {model.config}",
                  file=sys.stderr)
            return 2
        model.load_state_dict(src.state_dict())
    elif args.init == "jax":
        jax_init_(model, gen=torch.Generator().manual_seed(args.seed + 2))
    if args.mimetic:
        mimetic_init_(model, gen=torch.Generator().manual_seed(args.seed + 1))
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {model.spec.name}: dim {args.embed_dim}, depth {args.depth}, heads {args.heads}, "
          f"{n_params / 1e6:.2f} M parameters; {args.steps} steps x {args.batch_size} images", flush=True)
    aux_head = torch.nn.Linear(args.embed_dim, len(CLASSES) + 1) if args.dense_labels > 0 else None
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "pos_embed" not in n and "token" not in n]
    if aux_head is not None:
        decay += list(aux_head.parameters())
    no_decay = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "pos_embed" not in n
                                                                and "token" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.999))
    warmup = max(1, int(round(args.warmup * args.steps)))
    val_x, val_y, _ = generate_batch(0, args.val_size, seed=args.seed, stream="val", size=size)

    t0 = time.perf_counter()
    model.train()
    run_loss, run_acc, run_n = 0.0, 0.0, 0
    def batch_params(step: int) -> tuple[int, float, float]:
        clutter = clutter_at(step, args.steps, args.curriculum, args.clutter_start)
        scale = args.scale_start + (1.0 - args.scale_start) * clutter_at(step, args.steps, args.curriculum)
        side = args.low_res if args.low_res and step < args.low_res_frac * args.steps else args.img_size
        return side, clutter, scale

    def make_batch(step: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        side, clutter, scale = batch_params(step)
        return generate_batch(step * args.batch_size, args.batch_size, seed=args.seed, stream="train",
                              size=(side, side), clutter=clutter, scale=scale, with_masks=True)

    # the next batch is generated in a background thread while this one trains (a pure function of its step)
    pool = ThreadPoolExecutor(max_workers=1)
    pending = pool.submit(make_batch, 0)
    for step in range(args.steps):
        side, clutter, scale = batch_params(step)
        imgs, labels, _, masks = pending.result()
        if step + 1 < args.steps:
            pending = pool.submit(make_batch, step + 1)
        x = torch.from_numpy(imgs).permute(0, 3, 1, 2).float().div_(255.0)
        x, m = augment(x, gen, torch.from_numpy(masks))
        pre = model.spec.preprocess
        x = (x - torch.tensor(pre.mean).view(1, 3, 1, 1)) / torch.tensor(pre.std).view(1, 3, 1, 1)
        y = torch.from_numpy(labels)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.steps, args.lr, warmup)
        feats = model.forward_features(x)
        logits = model.forward_head(feats)
        loss = F.cross_entropy(logits, y, label_smoothing=args.label_smoothing)
        if args.token_labels > 0:
            loss = loss + args.token_labels * token_label_loss(model, feats, m, y, args.label_smoothing)
        if aux_head is not None:
            loss = loss + args.dense_labels * dense_label_loss(model, aux_head, feats, m, y)
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
                  f"{side}px  clutter {clutter:.2f}  scale {scale:.2f}  loss {run_loss / run_n:.4f}  train acc {run_acc / run_n:.3f}  val acc {val:.3f}  "
                  f"elapsed {el / 60:.1f} min  eta {(args.steps - step - 1) * el / (step + 1) / 60:.1f} min",
                  flush=True)
            run_loss, run_acc, run_n = 0.0, 0.0, 0
    pool.shutdown()
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
