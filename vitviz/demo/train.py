"""Train the bundled shapes demo model: ``python -m vitviz.demo.train``.

A small :class:`~vitviz.model.ViT` (112 px input, patch 8: a 14 x 14 grid like ViT-B/16 at 224) is trained from
scratch on :mod:`vitviz.demo.shapes` images. ``--pool-size`` images of the ``"train"`` stream are generated up front
by ``--workers`` processes (generating is about as costly as a training step, so each image is reused over a few
epochs, in a seeded order, with augmentation: horizontal flips, channel order, brightness/contrast jitter). A run is
reproducible from its ``--seed`` at a fixed ``--threads``.

The recipe: sin-cos position embeddings; the original ViT's (JAX) initialisation with the patch embedding set to
whitened principal components of the training patches (:func:`pca_patch_init_`); AdamW (weight decay on matrices only)
with a small batch and gradient clipping, in two phases, each with linear warmup then cosine decay: ``--low-res-steps``
at ``--low-res`` px (56: a 7 x 7 grid, about 4x cheaper per image, the position embeddings resampled) at a high peak
learning rate ``--lr``, then ``--steps`` at the full 112 px at ``--full-res-lr``; and a dense auxiliary loss
(``--dense-labels``, in the spirit of token labelling, Jiang et al. 2021): every patch token predicts "object class or
background" through a separate linear head that is thrown away after training. The [CLS] token, whose attention the app
visualises, is trained by the ordinary classification loss only. ``--init-from`` continues from a checkpoint.

Progress is printed every ``--log-every`` steps with the accuracy on a fixed validation set (the ``"val"`` stream,
never used for training).

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
from vitviz.model import load_checkpoint, save_checkpoint
from vitviz.model.preprocess import INCEPTION_MEAN, INCEPTION_STD, Preprocess
from vitviz.model.spec import ModelSpec
from vitviz.model.vit import ViT

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


def augment(x: torch.Tensor, gen: torch.Generator, masks: torch.Tensor | None = None):
    """Batch augmentation on ``[B, 3, H, W]`` images in [0, 1]: horizontal flips, a random channel order per image,
    brightness and contrast jitter (+-20 %). The input is not modified.

    ``masks [B, H, W]`` (optional) get the same flips; then ``(images, masks)`` is returned.
    """
    B = x.shape[0]
    flip = torch.rand(B, generator=gen) < 0.5
    perm = torch.argsort(torch.rand(B, 3, generator=gen), dim=1)
    x = torch.gather(x, 1, perm.view(B, 3, 1, 1).expand_as(x))  # a new tensor: flipped and jittered in place
    x[flip] = x[flip].flip(-1)
    bright = 1 + (torch.rand(B, 1, 1, 1, generator=gen) - 0.5) * 0.4
    contrast = 1 + (torch.rand(B, 1, 1, 1, generator=gen) - 0.5) * 0.4
    mean = x.mean(dim=(1, 2, 3), keepdim=True)
    x.sub_(mean).mul_(contrast).add_(mean).mul_(bright).clamp_(0, 1)
    if masks is None:
        return x
    return x, torch.where(flip.view(B, 1, 1), masks.flip(-1), masks)


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


@torch.no_grad()
def evaluate(model: ViT, images: np.ndarray, labels: np.ndarray, batch_size: int = 100, side: int | None = None
             ) -> float:
    """Top-1 accuracy on ``uint8 [N, H, W, 3]`` images (downscaled to ``side`` px, area-averaged, when given)."""
    was_training = model.training
    model.eval()
    correct = 0
    for i in range(0, len(images), batch_size):
        x = to_input(images[i:i + batch_size], model.spec.preprocess)
        if side is not None and side != x.shape[-1]:
            x = F.interpolate(x, size=(side, side), mode="area")
        correct += int((model(x).argmax(-1).numpy() == labels[i:i + batch_size]).sum())
    model.train(was_training)
    return correct / max(1, len(images))


@torch.no_grad()
def pca_patch_init_(model: ViT, images: torch.Tensor, eps: float = 1e-2) -> None:
    """Data-dependent patch-embedding initialisation: the filters whiten the leading principal components of the
    training patches.

    Every non-overlapping ``P x P`` patch of ``images`` (normalised ``[B, 3, H, W]``) is flattened; filter ``i`` is
    eigenvector ``i`` of their covariance (descending eigenvalue) divided by ``sqrt(eigenvalue + eps)``, the bias
    makes the mean patch embed to zero. Each embedding dimension then starts as a decorrelated, unit-variance
    feature that keeps the patch's most important structure (colour, then edges at growing frequency), instead of a
    random projection. Like the whitened first layer of fast CIFAR-10 training recipes (Page 2018; Jordan 2024),
    it removes the slowest part of learning from scratch.
    """
    P = model.patch_size
    D = model.embed_dim
    x = images.float()
    patches = x.unfold(2, P, P).unfold(3, P, P).permute(0, 2, 3, 1, 4, 5).reshape(-1, x.shape[1] * P * P)
    if patches.shape[1] < D:
        raise ValueError(f"embed_dim {D} exceeds the patch dimension {patches.shape[1]}")
    mean = patches.mean(0)
    centred = patches.double() - mean.double()
    cov = centred.T @ centred / max(1, len(centred) - 1)
    evals, evecs = torch.linalg.eigh(cov)  # ascending
    evals, evecs = evals.flip(0)[:D].clamp_min(0), evecs.flip(1)[:, :D]
    # a deterministic sign per eigenvector (eigh's is arbitrary): the largest-magnitude entry is positive
    sign = torch.sign(evecs.gather(0, evecs.abs().argmax(0, keepdim=True)))
    w = (evecs * sign / (evals + eps).sqrt()).T.float()  # [D, 3 P P]
    model.patch_embed.proj.weight.copy_(w.reshape(D, x.shape[1], P, P))
    model.patch_embed.proj.bias.copy_(-(w @ mean))


def _pool_chunk(args: tuple[int, int, int, int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    start, count, seed, side = args
    x, y, _, m = generate_batch(start, count, seed=seed, stream="train", size=(side, side), with_masks=True)
    return x, y, np.round(m * 255).astype(np.uint8)


def make_pool(count: int, seed: int, side: int = BASE, workers: int = 1, chunk: int = 250
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Training images ``0 .. count-1`` of the ``"train"`` stream, generated by ``workers`` processes.

    Returns:
        ``images uint8 [count, side, side, 3]``, ``labels int64 [count]``, ``masks uint8 [count, side, side]``
        (object coverage x 255). Identical for any ``workers``: every image depends only on its index and seed.
    """
    jobs = [(s, min(chunk, count - s), seed, side) for s in range(0, count, chunk)]
    if workers <= 1 or len(jobs) == 1:
        parts = [_pool_chunk(j) for j in jobs]
    else:
        import multiprocessing

        with multiprocessing.get_context("spawn").Pool(workers) as pool:
            parts = pool.map(_pool_chunk, jobs)
    images, labels, masks = (np.concatenate(p) for p in zip(*parts))
    return images, labels, masks


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m vitviz.demo.train", description=__doc__.split("\n\n")[0])
    p.add_argument("--low-res-steps", type=int, default=12000,
                   help="phase 1: optimizer steps at --low-res px (0: skip the phase)")
    p.add_argument("--steps", type=int, default=2500, help="phase 2: optimizer steps at the full 112 px")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--pool-size", type=int, default=40000,
                   help="training images generated up front (the \"train\" stream, indices 0..N-1); training "
                        "cycles through them in a seeded order, with augmentation")
    p.add_argument("--workers", type=int, default=2, help="processes that generate the training images")
    p.add_argument("--lr", type=float, default=2e-3, help="peak learning rate of phase 1")
    p.add_argument("--full-res-lr", type=float, default=5e-4, help="peak learning rate of phase 2")
    p.add_argument("--weight-decay", type=float, default=0.05)
    p.add_argument("--warmup", type=float, default=0.05, help="warmup steps as a fraction of each phase's steps")
    p.add_argument("--label-smoothing", type=float, default=0.0)
    p.add_argument("--embed-dim", type=int, default=64)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--drop-path", type=float, default=0.0)
    p.add_argument("--low-res", type=int, default=56, help="image side of phase 1 (a multiple of the patch size 8)")
    p.add_argument("--token-labels", type=float, default=0.0,
                   help="weight of the token-labelling loss (Jiang et al. 2021): patch tokens covering the object "
                        "also predict its class through the shared head (0: off)")
    p.add_argument("--dense-labels", type=float, default=1.0,
                   help="weight of a dense auxiliary loss: every patch token predicts object class or background "
                        "through a separate head that is discarded after training (0: off)")
    p.add_argument("--pos-embed", choices=("learned", "sincos"), default="sincos")
    p.add_argument("--init", choices=("timm", "jax"), default="jax",
                   help="weight initialisation: timm (normal, std 0.02) or jax (Xavier; the original ViT's)")
    p.add_argument("--patch-init", choices=("pca", "random"), default="pca",
                   help="patch-embedding filters: whitened principal components of the training patches, or the "
                        "--init scheme's random ones")
    p.add_argument("--mimetic", action="store_true", help="mimetic query/key initialisation (Trockman & Kolter 2023)")
    p.add_argument("--init-from", type=Path, default=None,
                   help="start from this checkpoint's weights (same architecture) instead of random ones")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads (results depend slightly on it)")
    p.add_argument("--val-size", type=int, default=500)
    p.add_argument("--log-every", type=int, default=500)
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
    if args.low_res % 8 or args.low_res < 0 or args.low_res > BASE:
        print(f"error: --low-res {args.low_res} must be 0 or a multiple of the patch size 8 up to {BASE}",
              file=sys.stderr)
        return 2
    if args.steps < 1 or args.low_res_steps < 0 or args.batch_size < 1 or args.pool_size < args.batch_size:
        print("error: --steps and --batch-size must be positive, --low-res-steps non-negative and --pool-size at "
              "least --batch-size",
              file=sys.stderr)
        return 2
    torch.set_num_threads(max(1, args.threads))
    torch.manual_seed(args.seed)
    gen = torch.Generator().manual_seed(args.seed)
    t_start = time.perf_counter()

    images, labels, masks = make_pool(args.pool_size, args.seed, workers=args.workers)
    X = torch.from_numpy(images).permute(0, 3, 1, 2).contiguous()  # uint8 [N, 3, H, W]
    del images  # the channels-last copy (1.5 GB for the default pool)
    Y, M = torch.from_numpy(labels), torch.from_numpy(masks)
    val_x, val_y, _ = generate_batch(0, args.val_size, seed=args.seed, stream="val")
    print(f"generated {len(X)} training and {len(val_x)} validation images in "
          f"{time.perf_counter() - t_start:.0f} s ({args.workers} workers)", flush=True)

    model = build_model(args.embed_dim, args.depth, args.heads, drop_path_rate=args.drop_path,
                        pos_embed=args.pos_embed)
    pre = model.spec.preprocess
    mean, std = torch.tensor(pre.mean).view(1, 3, 1, 1), torch.tensor(pre.std).view(1, 3, 1, 1)
    if args.init_from is not None:
        src = load_checkpoint(args.init_from)
        if src.config != model.config:
            print(f"error: {args.init_from}: architecture {src.config} differs from the requested {model.config}",
                  file=sys.stderr)
            return 2
        model.load_state_dict(src.state_dict())
    else:
        if args.init == "jax":
            jax_init_(model, gen=torch.Generator().manual_seed(args.seed + 2))
        if args.patch_init == "pca":
            pca_patch_init_(model, (X[:2000].float() / 255 - mean) / std)
        if args.mimetic:
            mimetic_init_(model, gen=torch.Generator().manual_seed(args.seed + 1))
    n_params = sum(p.numel() for p in model.parameters())
    print(f"model: {model.spec.name}: dim {args.embed_dim}, depth {args.depth}, heads {args.heads}, "
          f"{n_params / 1e6:.2f} M parameters; "
          f"{args.low_res_steps if args.low_res else 0} steps at {args.low_res} px, then {args.steps} at {BASE} px, "
          f"{args.batch_size} images each", flush=True)
    aux_head = torch.nn.Linear(args.embed_dim, len(CLASSES) + 1) if args.dense_labels > 0 else None
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2 and "pos_embed" not in n and "token" not in n]
    if aux_head is not None:
        decay += list(aux_head.parameters())
    no_decay = [p for n, p in model.named_parameters() if not (p.ndim >= 2 and "pos_embed" not in n
                                                                and "token" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.999))
    phases = [(args.low_res, args.low_res_steps, args.lr)] if args.low_res and args.low_res_steps else []
    phases.append((BASE, args.steps, args.full_res_lr))

    t0 = time.perf_counter()
    model.train()
    order, pos = torch.randperm(len(X), generator=gen), 0
    for phase, (side, n_steps, peak_lr) in enumerate(phases, 1):
        warmup = max(1, int(round(args.warmup * n_steps)))
        run_loss, run_acc, run_n = 0.0, 0.0, 0
        for step in range(n_steps):
            if pos + args.batch_size > len(order):
                order, pos = torch.randperm(len(X), generator=gen), 0
            idx = order[pos:pos + args.batch_size]
            pos += args.batch_size
            x, m = X[idx].float(), M[idx].float()
            if side != x.shape[-1]:  # downscale first: augmenting the small images is cheaper
                x = F.interpolate(x, size=(side, side), mode="area")
                m = F.interpolate(m[:, None], size=(side, side), mode="area")[:, 0]
            x, m = augment(x.div_(255.0), gen, m.div_(255.0))
            x = (x - mean) / std
            y = Y[idx]
            for g in opt.param_groups:
                g["lr"] = lr_at(step, n_steps, peak_lr, warmup)
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
            if (step + 1) % args.log_every == 0 or step + 1 == n_steps:
                el = time.perf_counter() - t0
                val = evaluate(model, val_x, val_y, side=side) if args.val_size else float("nan")
                print(f"phase {phase}/{len(phases)} step {step + 1:5d}/{n_steps}  {side}px  "
                      f"lr {opt.param_groups[0]['lr']:.2e}  loss {run_loss / run_n:.4f}  "
                      f"train acc {run_acc / run_n:.3f}  val acc {val:.3f}  elapsed {el / 60:.1f} min", flush=True)
                run_loss, run_acc, run_n = 0.0, 0.0, 0
    model.eval()
    out.parent.mkdir(parents=True, exist_ok=True)
    save_checkpoint(model, out, overwrite=True)
    val = evaluate(model, val_x, val_y) if args.val_size else float("nan")
    print(f"done in {(time.perf_counter() - t_start) / 60:.1f} min; validation accuracy {val:.4f}; saved {out} "
          f"({out.stat().st_size / 1e6:.2f} MB)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
