"""The figure of ``vitviz stats`` (the ViT paper's Fig. 7 right, per head, plus the artefact frequency): a
matplotlib Figure without pyplot, and its PNG / SVG bytes. matplotlib is imported when a figure is drawn."""

from __future__ import annotations

import io
import math

import numpy as np

from vitviz.batch.stats import DatasetStats
from vitviz.render import colormaps


def head_colours(H: int) -> list[tuple[float, float, float]]:
    """One colour per head in 0..1, the window's (:func:`vitviz.render.colormaps.head_colours`: tab10 / tab20, a
    hue wheel beyond 20 heads)."""
    return [(r / 255, g / 255, b / 255) for r, g, b in colormaps.head_colours(H)]


def stats_figure(stats: DatasetStats):
    """A matplotlib Figure (no pyplot): (a) mean attention distance and (b) attention entropy against the layer,
    one colour per head, error bars = one standard deviation over the images; (c) how often each patch position is
    flagged as a high-norm token."""
    from matplotlib.figure import Figure

    L, H = stats.num_layers, stats.num_heads
    has_art = stats.artefact_frequency is not None
    fig = Figure(figsize=(13.5 if has_art else 9.5, 4.3), layout="constrained")
    axes = fig.subplots(1, 3 if has_art else 2, width_ratios=[1, 1, 0.8] if has_art else [1, 1])
    colours = head_colours(H)
    offsets = (np.arange(H) - (H - 1) / 2) * (0.5 / max(H, 1))
    for ax, mean, sd, what, unit in ((axes[0], stats.distance_mean, stats.distance_sd,
                                      "Mean attention distance", "mean attention distance (input px)"),
                                     (axes[1], stats.entropy_mean, stats.entropy_sd,
                                      "Attention entropy", "mean attention entropy (nats)")):
        for h in range(H):
            ax.errorbar(np.arange(L) + offsets[h], mean[:, h], yerr=sd[:, h], fmt="o", ms=3.5, lw=0.8,
                        capsize=1.5, color=colours[h], label=f"head {h}")
        ax.set_xlabel("network depth (layer)")
        ax.set_ylabel(unit)
        ax.set_xticks(range(L))
        ax.set_xlim(-0.6, L - 0.4)
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.25)
        ax.set_title(f"{what} per head · {stats.images} image{'s' * (stats.images != 1)}", fontsize=10)
    if stats.num_tokens > 1:
        top = math.log(stats.num_tokens)
        axes[1].axhline(top, color="0.4", lw=0.8, ls="--", label=f"uniform attention (ln {stats.num_tokens})")
        tops = stats.entropy_mean + stats.entropy_sd
        tops = tops[np.isfinite(tops)]  # (a cell whose attention was not finite is nan: a gap, not a warning)
        high = float(tops.max()) if tops.size else top
        axes[1].set_ylim(0, max(top, high) * 1.06)  # the line below the frame, not on it
    handles, labels = axes[1].get_legend_handles_labels()
    ncol = 1 if len(labels) <= 13 else 2
    axes[1].legend(handles, labels, fontsize=7, ncol=ncol, loc="upper left", bbox_to_anchor=(1.01, 1.0),
                   title="mean ± 1 sd over images", title_fontsize=7, frameon=False)
    if has_art:
        ax = axes[2]
        f = stats.artefact_frequency
        from matplotlib.ticker import MaxNLocator

        top = float(f.max())
        im = ax.imshow(f, cmap="magma", vmin=0.0, vmax=top if top > 0 else 1.0, interpolation="nearest")
        ax.set_xlabel("patch column")
        ax.set_ylabel("patch row")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(f"High-norm (artefact) tokens · {stats.artefact_images} images", fontsize=10)
        if top <= 0:
            ax.text(0.5, 0.5, "no patch flagged\nin any image", transform=ax.transAxes, ha="center", va="center",
                    color="white", fontsize=9)
        cb = fig.colorbar(im, ax=ax, shrink=0.85)
        cb.set_label("fraction of images flagged")
    computed = f" · computed in {stats.precision}" if stats.precision else ""
    fig.suptitle(f"{stats.model}: attention statistics over {stats.images} image{'s' * (stats.images != 1)}"
                 f"{computed}", fontsize=11)
    return fig


def figure_bytes(stats: DatasetStats, fmt: str) -> bytes:
    """The figure as PNG (150 dpi) or SVG (text as text) bytes."""
    import matplotlib

    fig = stats_figure(stats)
    buf = io.BytesIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "vitviz", "font.family": "DejaVu Sans"}):
        fig.savefig(buf, format=fmt, dpi=150, metadata={"Date": None} if fmt == "svg" else None)
    return buf.getvalue()
