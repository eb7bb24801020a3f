"""Forward-pass speed: vitviz's fused ViT against torchvision's ``vit_b_16`` with the same (random) weights.

CPU, fp32, 224 px, batch 1 and 8, ``torch.inference_mode``; both models are timed in the same process, interleaved
(the order alternates every round) after a few warm-up calls. Prints the median time of each and the ratio
vitviz / torchvision, of wall-clock time and of process CPU time (steadier when other processes share the cores).
Target: ratio <= 1.05.

A second, low-noise view times a single encoder block of each (same weights, ``--block-rounds`` interleaved rounds).

Usage: ``python bench/forward.py [--rounds 9] [--warmup 2] [--threads N] [--batch 1 8] [--device cpu]
[--block-rounds 40]``.
Absolute times on shared machines are noise; read the ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from vitviz.model import load_checkpoint  # noqa: E402


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _time(model: torch.nn.Module, x: torch.Tensor, device: str) -> tuple[float, float]:
    """Wall-clock and process CPU seconds of one forward."""
    _sync(device)
    c, t = time.process_time(), time.perf_counter()
    model(x)
    _sync(device)
    return time.perf_counter() - t, time.process_time() - c


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=9, help="timed calls per model and batch size")
    ap.add_argument("--warmup", type=int, default=2, help="untimed calls per model and batch size")
    ap.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's choice)")
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--block-rounds", type=int, default=40,
                    help="rounds of the single-block comparison (0: skip)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    import torchvision

    torch.manual_seed(0)
    tv = torchvision.models.vit_b_16(weights=None).eval()
    with torch.no_grad():  # torchvision zero-initialises the head: randomise it so the logits check means something
        torch.nn.init.normal_(tv.heads.head.weight, std=0.02)
    ours = load_checkpoint(tv.state_dict()).eval()
    tv, ours = tv.to(args.device), ours.to(args.device)
    print(f"torch {torch.__version__}, torchvision {torchvision.__version__}, device {args.device}, "
          f"threads {torch.get_num_threads()}, fp32, 224 px, vit_b_16 ({ours.num_params() / 1e6:.1f} M parameters)")

    with torch.inference_mode():
        x = torch.randn(2, 3, 224, 224, device=args.device)
        err = (ours(x) - tv(x)).abs().max().item()
    print(f"same weights: max |logits(vitviz) - logits(torchvision)| = {err:.2e}")
    if err > 1e-3:
        print("weights were not transferred", file=sys.stderr)
        return 1

    ratios = []
    for b in args.batch:
        x = torch.randn(b, 3, 224, 224, device=args.device)
        t_ours: list[tuple[float, float]] = []
        t_tv: list[tuple[float, float]] = []
        with torch.inference_mode():
            for _ in range(args.warmup):
                ours(x)
                tv(x)
            for r in range(args.rounds):
                pair = [(ours, t_ours), (tv, t_tv)]
                if r % 2:
                    pair.reverse()
                for model, acc in pair:
                    acc.append(_time(model, x, args.device))
        mo, mt = (statistics.median(w for w, _ in ts) for ts in (t_ours, t_tv))
        co, ct = (statistics.median(c for _, c in ts) for ts in (t_ours, t_tv))
        ratio = mo / mt
        ratios.append(ratio)
        print(f"batch {b}: wall  vitviz {mo * 1e3:8.1f} ms   torchvision {mt * 1e3:8.1f} ms   ratio {ratio:.3f}   "
              f"(per-round {', '.join(f'{a[0] / c[0]:.2f}' for a, c in zip(t_ours, t_tv))})")
        print(f"         cpu   vitviz {co * 1e3:8.1f} ms   torchvision {ct * 1e3:8.1f} ms   ratio {co / ct:.3f}   "
              "(process CPU time: steadier than wall time on a busy machine)")
    if args.block_rounds > 0:
        # one encoder block (same weights), many cheap interleaved rounds: a low-noise view of the same comparison
        ob, tb = ours.blocks[0], tv.encoder.layers[0]
        for b in args.batch:
            x = torch.randn(b, 197, 768, device=args.device)
            t_o: list[tuple[float, float]] = []
            t_t: list[tuple[float, float]] = []
            with torch.inference_mode():
                for _ in range(3):
                    ob(x)
                    tb(x)
                for r in range(args.block_rounds):
                    for m, acc in ([(ob, t_o), (tb, t_t)] if r % 2 else [(tb, t_t), (ob, t_o)]):
                        acc.append(_time(m, x, args.device))
            wo, wt = (statistics.median(w for w, _ in ts) for ts in (t_o, t_t))
            co, ct = (statistics.median(c for _, c in ts) for ts in (t_o, t_t))
            print(f"one block, batch {b}: wall ratio {wo / wt:.3f} ({wo * 1e3:.1f} / {wt * 1e3:.1f} ms), "
                  f"cpu ratio {co / ct:.3f} ({co * 1e3:.1f} / {ct * 1e3:.1f} ms), {args.block_rounds} rounds")
    worst = max(ratios)
    print(f"worst ratio vitviz / torchvision: {worst:.3f} (target <= 1.05: {'met' if worst <= 1.05 else 'NOT met'})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
