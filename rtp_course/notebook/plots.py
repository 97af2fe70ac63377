"""Matplotlib pictures for the notebooks: who holds what, where the bytes go, how the loss falls.

Every function draws on a given `ax` (or a new figure) and returns the axes,
so a notebook can combine them. Nothing here communicates or trains.

* ``collective``: each rank's tensor before and after a collective, cells
  coloured by the rank their value came from (grey hatched: a sum of several).
* ``memory_vs_world_size``: per-rank bytes against the number of ranks, one line per strategy.
* ``memory_bars``: stacked bars of bytes by category (parameters, gradients, ...).
* ``loss_curves``: one line per run, e.g. serial against data parallel.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter, MaxNLocator

from rtp_course.training.memory import human_bytes, sharded

CATEGORIES = ("parameters", "gradients", "optimizer", "activations", "buffers", "communication")

RANK_COLORS = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3",
               "#8C8C8C"]
MIXED = "#BBBBBB"       # a value that combines several ranks' values (a reduction)
EMPTY = "#FFFFFF"       # a placeholder nobody wrote yet


def _values(t) -> list:
    """A tensor, a list of tensors or of numbers -> a flat list of Python numbers."""
    if hasattr(t, "flatten"):
        return [float(v) for v in t.flatten().tolist()]
    out = []
    for item in t:
        out += _values(item) if hasattr(item, "flatten") or isinstance(item, (list, tuple)) \
            else [float(item)]
    return out


def _origins(before: dict) -> dict:
    """value -> the rank that held it first (for colouring)."""
    origin = {}
    for rank in sorted(before):
        for v in _values(before[rank]):
            origin.setdefault(v, rank)
    return origin


def _fmt(v: float) -> str:
    return f"{int(v)}" if float(v).is_integer() else f"{v:.3g}"


def _draw_state(ax, state: dict, origin: dict, empty, title: str, width: int, chunks=None) -> None:
    ranks = sorted(state)
    for row, rank in enumerate(ranks):
        y = len(ranks) - 1 - row
        values = _values(state[rank])
        per_chunk = len(values) // chunks if chunks and len(values) % chunks == 0 else None
        for i, v in enumerate(values):
            x = i + (0.3 * (i // per_chunk) if per_chunk else 0)     # a gap between chunks
            if empty is not None and v == empty:
                color, hatch, text = EMPTY, None, "·"
            elif v in origin:
                color, hatch, text = RANK_COLORS[origin[v] % len(RANK_COLORS)], None, _fmt(v)
            else:
                color, hatch, text = MIXED, "//", _fmt(v)
            ax.add_patch(Rectangle((x, y + 0.1), 0.92, 0.8, facecolor=color, edgecolor="#333333",
                                   hatch=hatch, linewidth=0.8))
            box = dict(boxstyle="round,pad=0.12", fc=MIXED, ec="none") if hatch else None
            ax.text(x + 0.46, y + 0.5, text, ha="center", va="center", fontsize=9, bbox=box,
                    color="black" if color in (MIXED, EMPTY) else "white", fontweight="bold")
        ax.text(-0.25, y + 0.5, f"rank {rank}", ha="right", va="center", fontsize=10,
                color=RANK_COLORS[rank % len(RANK_COLORS)])
    ax.set_xlim(-1.6, width + 0.1)
    ax.set_ylim(-0.1, len(ranks) + 0.1)
    ax.set_title(title, fontsize=11)
    ax.axis("off")


def collective(before: dict, after: dict, title: str = "", empty=None, axes=None,
               before_chunks=None, after_chunks=None):
    """Before/after picture of a collective. `before`, `after`: {rank: tensor or list of tensors}.

    Values are coloured by the rank that held them in `before`; a value that
    nobody held before is a combination (grey, hatched). `empty`: a placeholder
    value (e.g. 0 in a receive buffer) drawn as an empty cell. `before_chunks`,
    `after_chunks`: draw each rank's values as that many chunks, with gaps.
    """
    lengths = [len(_values(t)) for t in list(before.values()) + list(after.values())]
    gaps = 0.3 * (max(before_chunks or 1, after_chunks or 1) - 1)
    width = max(lengths) + gaps
    if axes is None:
        fig, axes = plt.subplots(1, 2, figsize=(min(15, 2.4 + 1.1 * width), 0.5 + 0.55 * len(before)))
    origin = _origins({r: [v for v in _values(t) if v != empty] for r, t in before.items()})
    _draw_state(axes[0], before, origin, empty, "before", width, before_chunks)
    _draw_state(axes[1], after, origin, empty, "after", width, after_chunks)
    if title:
        axes[0].figure.suptitle(title, fontsize=12, fontweight="bold")
    axes[0].figure.tight_layout()
    return axes


def _bytes_axis(ax, axis="y"):
    fmt = FuncFormatter(lambda v, _: human_bytes(v) if v > 0 else "0")
    (ax.yaxis if axis == "y" else ax.xaxis).set_major_formatter(fmt)


STRATEGY_LABELS = {"ddp": "DDP (replicate all)", "zero1": "ZeRO-1 (shard optimizer)",
                   "zero2": "ZeRO-2 (+ gradients)", "fsdp": "FSDP / ZeRO-3 (+ parameters)",
                   "tp": "Tensor parallel", "rtp": "RTP (rotated shards)"}
# TP and RTP hold the same states: dashes keep both lines visible where they overlap.
STRATEGY_STYLES = {"tp": dict(marker="s", linewidth=3, alpha=0.6),
                   "rtp": dict(marker="o", linestyle="--")}


def memory_vs_world_size(breakdown, world_sizes, strategies=("ddp", "zero1", "zero2", "fsdp", "rtp"),
                         largest_layer_bytes: int = 0, gpu_bytes=None, ax=None, log: bool = True):
    """Per-rank total bytes against the number of ranks, one line per strategy (see memory.sharded)."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.2))
    world_sizes = list(world_sizes)
    for s in strategies:
        totals = [sharded(breakdown, n, s, largest_layer_bytes).total for n in world_sizes]
        style = STRATEGY_STYLES.get(s, dict(marker="o"))
        ax.plot(world_sizes, totals, label=STRATEGY_LABELS.get(s, s), **style)
    if gpu_bytes:
        ax.axhline(gpu_bytes, color="black", linestyle="--", linewidth=1)
        ax.text(world_sizes[-1], gpu_bytes, f" one GPU: {human_bytes(gpu_bytes)}", va="bottom",
                ha="right", fontsize=9)
    ax.set_xscale("log", base=2)
    ax.set_xticks(world_sizes)
    ax.set_xticklabels([str(n) for n in world_sizes])
    if log:
        ax.set_yscale("log")
    _bytes_axis(ax)
    ax.set_xlabel("ranks (GPUs)")
    ax.set_ylabel("bytes per rank")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=9)
    return ax


def memory_bars(breakdowns: dict, ax=None, categories=CATEGORIES, title: str = ""):
    """Stacked bars, one per entry of `breakdowns` ({label: MemoryBreakdown or dict})."""
    if ax is None:
        _, ax = plt.subplots(figsize=(1.6 + 1.3 * len(breakdowns), 4.2))
    labels = list(breakdowns)
    bottoms = [0.0] * len(labels)
    for k, cat in enumerate(categories):
        heights = [float(breakdowns[lab][cat]) for lab in labels]
        if not any(heights):
            continue
        ax.bar(labels, heights, bottom=bottoms, label=cat, color=plt.cm.tab10(k))
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    for i, total in enumerate(bottoms):
        ax.text(i, total, human_bytes(total), ha="center", va="bottom", fontsize=9)
    _bytes_axis(ax)
    ax.set_ylabel("bytes")
    ax.set_ylim(0, max(bottoms + [1]) * 1.12)
    if title:
        ax.set_title(title)
    ax.legend(fontsize=9)
    return ax


def loss_curves(curves: dict, ax=None, xlabel: str = "step", ylabel: str = "loss", title: str = "",
                styles: dict | None = None):
    """One line per entry of `curves` ({label: list of values}); None entries are skipped."""
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4))
    styles = styles or {}
    for label, values in curves.items():
        if values is None:
            continue
        ax.plot(range(1, len(values) + 1), values, label=label, **styles.get(label, {}))
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))    # steps: no half-step ticks
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    return ax
