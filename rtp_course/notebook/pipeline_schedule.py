"""Pipeline schedules on an ideal clock, for notebook 11: when each stage runs each micro-batch's
forward and backward, its bubble, and the micro-batches it holds. Nothing here communicates.

* ``simulate(n, m, orders, t_f, t_b)``: each stage runs its own order ("F0 F1 B0 ...") as
  early as the dependencies allow (F of micro-batch i on stage r after F on r-1; B on r after
  B on r+1, or after its own F on the last stage): {stage: [(kind, i, start, end)]}.
* ``bubble(timeline)``: the idle share of the step, (N-1)/(M+N-1) for GPipe and 1F1B.
* ``held(timeline)``: the most micro-batches each stage holds (forward done, backward not).
* ``draw(timeline, title, ax)``: one row per stage, forwards and backwards coloured.
* ``measured(results)``: the ranks' own recorded spans (demos.pipeline.schedule_demo) as a timeline.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import Patch, Rectangle

from rtp_course.notebook.plots import RANK_COLORS


def gpipe_order(n: int, m: int, stage: int) -> list:
    return [("F", i) for i in range(m)] + [("B", i) for i in range(m)]


def one_f_one_b_order(n: int, m: int, stage: int) -> list:
    w = min(n - stage - 1, m)
    order = [("F", i) for i in range(w)]
    for i in range(m - w):
        order += [("F", w + i), ("B", i)]
    return order + [("B", i) for i in range(m - w, m)]


def simulate(n: int, m: int, order=gpipe_order, t_f: float = 1.0, t_b: float = 2.0) -> dict:
    """Each stage's (kind, micro-batch, start, end), its order as early as the data allow."""
    orders = {r: order(n, m, r) for r in range(n)}
    done, clock, pos = {}, [0.0] * n, [0] * n
    out = {r: [] for r in range(n)}
    while any(pos[r] < len(orders[r]) for r in range(n)):
        moved = False
        for r in range(n):
            if pos[r] == len(orders[r]):
                continue
            kind, i = orders[r][pos[r]]
            need = ([("F", r - 1, i)] if kind == "F" and r > 0 else []) + \
                   ([("B", r + 1, i)] if kind == "B" and r < n - 1 else []) + \
                   ([("F", r, i)] if kind == "B" else [])
            if all(k in done for k in need):
                start = max([clock[r]] + [done[k] for k in need])
                end = start + (t_f if kind == "F" else t_b)
                done[(kind, r, i)], clock[r] = end, end
                out[r].append((kind, i, start, end))
                pos[r] += 1
                moved = True
        if not moved:
            raise RuntimeError("this order waits forever: a stage needs what comes after it")
    return out


def bubble(timeline: dict) -> float:
    """The share of the stages' time spent idle between the step's start and its end."""
    end = max(e for ops in timeline.values() for *_, e in ops)
    busy = sum(e - s for ops in timeline.values() for *_, s, e in ops)
    return 1 - busy / (end * len(timeline))


def held(timeline: dict) -> dict:
    """Per stage, the most micro-batches whose forward ran and whose backward has not."""
    out = {}
    for r, ops in timeline.items():
        alive = peak = 0
        for kind, *_ in ops:
            alive += 1 if kind == "F" else -1
            peak = max(peak, alive)
        out[r] = peak
    return out


def draw(timeline: dict, title: str = "", ax=None, xlabel="time (a forward = 1, a backward = 2)",
         bubble_shown: bool = True):
    """One row per stage: forwards in the stage's colour, backwards hatched, micro-batch numbers;
    the title gives the bubble (ideal timelines) and the micro-batches each stage held."""
    ax = ax or plt.gca()
    n = len(timeline)
    for r, ops in timeline.items():
        color = RANK_COLORS[r % len(RANK_COLORS)]
        for kind, i, start, end in ops:
            ax.add_patch(Rectangle((start, n - 1 - r), end - start, 0.8, facecolor=color,
                                   alpha=1.0 if kind == "F" else 0.55, edgecolor="black",
                                   hatch=None if kind == "F" else "//"))
            ax.text((start + end) / 2, n - 1 - r + 0.4, f"{kind}{i}", ha="center", va="center",
                    fontsize=7)
    end = max(e for ops in timeline.values() for *_, e in ops)
    ax.set_xlim(0, end)
    ax.set_ylim(-0.2, n)
    ax.set_yticks([n - 1 - r + 0.4 for r in range(n)], [f"stage {r}" for r in range(n)])
    ax.set_xlabel(xlabel)
    said = f"bubble {bubble(timeline):.0%}, " if bubble_shown else ""
    ax.set_title(f"{title}  {said}micro-batches held per stage {list(held(timeline).values())}")
    ax.legend(handles=[Patch(facecolor="grey", label="forward"),
                       Patch(facecolor="grey", alpha=0.55, hatch="//", label="backward")],
              loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=7)
    return ax


def measured(results) -> dict:
    """The ranks' own spans (schedule_demo's), in one timeline from the earliest start; a span
    whose end was not seen ends where the stage's next one starts."""
    t0 = min(s[2] for res in results for s in res["spans"])
    out = {}
    for r, res in enumerate(results):
        spans = sorted(res["spans"], key=lambda s: s[2])
        ops = []
        for j, (kind, i, start, end) in enumerate(spans):
            if end is None:
                end = spans[j + 1][2] if j + 1 < len(spans) else start
            ops.append((kind, i, start - t0, end - t0))
        out[r] = ops
    return out
