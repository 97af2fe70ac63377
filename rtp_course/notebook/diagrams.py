"""Pictures of who holds what and where it is communicated, for notebooks 02 to 08.
Nothing here communicates.

* ``data_parallel_step``: replicas, local gradients, the all-reduce, the identical step (02).
* ``tp_mlp``: the column-then-row split MLP with Megatron's f and g around it (03).
* ``weight_split``: parameter matrices cut in blocks, each block coloured by the rank
  that holds it (grey: replicated on every rank); head boundaries as thin lines.
* ``ring_steps``: what every rank holds after each rotation, coloured by where it came from.
* ``rtp_schedule``: which weight shard (and gradient accumulator) each rank holds at each
  step of an RTP forward and backward pass.
* ``rank_layout``: the 2D grid of ranks, its tensor-parallel rows and data-parallel columns.
* ``flat_shards``: flat vectors padded to N equal shards, each element coloured by the rank
  that keeps it, the padding hatched (ZeRO-1 cuts each parameter, FSDP each layer) (09).
* ``ring_attention_schedule``: whose keys and values each rank holds at each step of ring
  attention's forward and backward, with the gradient accumulators of backward (10).
* ``causal_work``: the causal mask of a sequence, each query row coloured by the rank that
  holds it, contiguous and zig-zag, with each rank's count of unmasked scores (10).
* ``device_mesh``: the ranks of a (dp, pp, tp) mesh as a cube, each dimension's groups joined
  by what travels between them, with the calls a run counted (11's capstone).
"""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.lines import Line2D
from matplotlib.patches import FancyBboxPatch, Patch, Rectangle

from rtp_course.notebook.plots import RANK_COLORS

REPLICATED = "#BBBBBB"


def _color(rank):
    return RANK_COLORS[rank % len(RANK_COLORS)]


def _matrix(ax, x, y, rows, cols, split, world, label, heads=None, scale=1.0):
    """Draw a rows x cols matrix at (x, y) (top-left), cut in `world` blocks along `split`
    (0: rows, 1: columns, None: replicated). Returns the drawn width."""
    w, h = cols * scale, rows * scale
    if split is None:
        ax.add_patch(Rectangle((x, y - h), w, h, facecolor=REPLICATED, edgecolor="#333333"))
    else:
        for r in range(world):
            if split == 0:
                box = (x, y - h + (world - 1 - r) * h / world, w, h / world)
            else:
                box = (x + r * w / world, y - h, w / world, h)
            ax.add_patch(Rectangle(box[:2], box[2], box[3], facecolor=_color(r), edgecolor="#333333"))
            cx, cy = box[0] + box[2] / 2, box[1] + box[3] / 2
            ax.text(cx, cy, f"{r}", ha="center", va="center", color="white", fontsize=9,
                    fontweight="bold")
    if heads and split is not None:          # thin lines between heads inside the blocks
        for k in range(1, heads):
            if split == 0:
                ax.plot([x, x + w], [y - k * h / heads] * 2, color="white", linewidth=0.6)
            else:
                ax.plot([x + k * w / heads] * 2, [y - h, y], color="white", linewidth=0.6)
    ax.text(x + w / 2, y + 0.25, label, ha="center", va="bottom", fontsize=9)
    return w


def _box(ax, x, y, w, h, text, color, text_color="white", size=9):
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.03", facecolor=color,
                                edgecolor="#333333"))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", color=text_color, fontsize=size)


def _arrow(ax, x0, y0, x1, y1):
    ax.annotate("", xy=(x1, y1), xytext=(x0, y0),
                arrowprops=dict(arrowstyle="->", color="#333333", linewidth=1.2))


def data_parallel_step(world_size=2, in_hooks=False, ax=None):
    """One data-parallel step, a column per rank: its own slice of the batch, the same weights,
    its own gradient; one all-reduce averages the gradients; every rank then takes the same
    step. `in_hooks`: the all-reduce runs in gradient hooks, during the backward."""
    n, col, w = world_size, 3.0, 2.5
    if ax is None:
        _, ax = plt.subplots(figsize=(1.0 + 2.6 * n, 4.6))
    rows = [(5.0, lambda r: f"batch slice {r}\n(B/{n} samples)", _color, "white"),
            (4.0, lambda r: "model replica\nthe same W", lambda r: REPLICATED, "black"),
            (3.0, lambda r: f"backward: local\ngradient g{r}", _color, "white"),
            (1.0, lambda r: "the same mean\ngradient g", lambda r: REPLICATED, "black"),
            (0.0, lambda r: "optimizer step:\nthe same new W", lambda r: REPLICATED, "black")]
    for r in range(n):
        x = r * col
        for y, text, color, ink in rows:
            _box(ax, x, y, w, 0.7, text(r), color(r), ink)
        for y0, y1 in ((5.0, 4.7), (4.0, 3.7), (3.0, 2.55), (2.0, 1.7), (1.0, 0.7)):
            _arrow(ax, x + w / 2, y0, x + w / 2, y1)
        ax.text(x + w / 2, 5.95, f"rank {r}", ha="center", fontsize=10, color=_color(r),
                fontweight="bold")
    when = "in gradient hooks, while backward goes on" if in_hooks else "after backward"
    _box(ax, 0, 1.95, (n - 1) * col + w, 0.6,
         f"all-reduce (sum) of g0 ... g{n - 1}, then / {n}\n({when})", "white", "black", 9)
    ax.set_xlim(-0.2, (n - 1) * col + w + 0.2)
    ax.set_ylim(-0.2, 6.3)
    ax.axis("off")
    return ax


def tp_mlp(world_size=2, ax=None):
    """Y = GeLU(X A), Z = Y B split over ranks: A by columns, B by rows. f before the split
    (forward: identity, backward: all-reduce), g after it (forward: all-reduce, backward:
    identity); every rank ends with the whole Z."""
    n, row = world_size, 1.3
    height = n * row
    if ax is None:
        _, ax = plt.subplots(figsize=(13, 1.2 + 1.1 * n))
    mid = height / 2 - 0.45
    _box(ax, 0, mid, 1.6, 0.9, "X [b, d]\nreplicated", REPLICATED, "black")
    _box(ax, 2.2, 0, 1.7, height - 0.4, "f\nforward: identity\nbackward:\nall-reduce", "white", "black")
    _box(ax, 9.7, 0, 1.8, height - 0.4, "g\nforward:\nall-reduce\nbackward:\nidentity", "white", "black")
    _box(ax, 12.1, mid, 1.6, 0.9, "Z [b, d]\nreplicated", REPLICATED, "black")
    _arrow(ax, 1.6, mid + 0.45, 2.2, mid + 0.45)
    _arrow(ax, 11.5, mid + 0.45, 12.1, mid + 0.45)
    for r in range(n):
        y = (n - 1 - r) * row
        _box(ax, 4.4, y, 2.3, 0.9, f"rank {r}\nY{r} = GeLU(X A{r})\nA{r}: columns {r} of A", _color(r))
        _box(ax, 7.1, y, 2.2, 0.9, f"Z{r} = Y{r} B{r}\nB{r}: rows {r} of B\n(a partial sum)", _color(r))
        _arrow(ax, 3.9, y + 0.45, 4.4, y + 0.45)
        _arrow(ax, 6.7, y + 0.45, 7.1, y + 0.45)
        _arrow(ax, 9.3, y + 0.45, 9.7, y + 0.45)
    ax.text(6.85, height - 0.1, "no communication between f and g: each rank works on its own shard",
            ha="center", fontsize=9, style="italic")
    ax.set_xlim(-0.2, 13.9)
    ax.set_ylim(-0.3, height + 0.2)
    ax.axis("off")
    return ax


def weight_split(parts, world_size, title="", ax=None, gap=1.2):
    """Draw parameters side by side. `parts`: list of (label, rows, cols, split, heads)
    with split 0 (rows: output features of an nn.Linear weight [out, in]), 1 (columns)
    or None (replicated); heads: draw head boundaries (or None)."""
    scale = 6.0 / max(max(p[1], p[2]) for p in parts)
    depth = max(p[1] for p in parts) * scale + 0.6      # the tallest part, and a margin: wide
    if ax is None:                                      # flat parts leave no empty band below
        total = sum(p[2] * scale for p in parts) + gap * (len(parts) - 1)
        _, ax = plt.subplots(figsize=(min(14, 1.0 + 0.75 * total), 3.2 * (depth + 1.2) / 7.8))
    x, top = 0.0, 0.0
    for label, rows, cols, split, heads in parts:
        x += _matrix(ax, x, top, rows, cols, split, world_size, label, heads, scale) + gap
    ax.set_xlim(-0.3, x - gap + 0.3)
    ax.set_ylim(-depth, 1.2)
    ax.set_aspect("equal")
    ax.axis("off")
    handles = [Patch(facecolor=_color(r), label=f"rank {r}") for r in range(world_size)]
    handles.append(Patch(facecolor=REPLICATED, label="every rank (replicated)"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    if title:
        ax.set_title(title, fontsize=11)
    return ax


def ring_steps(steps, title="", ax=None):
    """`steps`: list over ranks of lists over steps of 1-D tensors (step 0 = own tensor).
    A cell's colour is the rank whose step-0 tensor held that value."""
    world, count = len(steps), len(steps[0])
    origin = {float(v): r for r in range(world) for v in steps[r][0].flatten().tolist()}
    if ax is None:
        _, ax = plt.subplots(figsize=(1.2 + 2.3 * count, 0.5 + 0.55 * world))
    for k in range(count):
        for r in range(world):
            values = steps[r][k].flatten().tolist()
            for i, v in enumerate(values):
                x, y = k * (len(values) + 1) + i, world - 1 - r
                color = _color(origin[v]) if v in origin else REPLICATED
                ax.add_patch(Rectangle((x, y + 0.1), 0.92, 0.8, facecolor=color, edgecolor="#333333"))
                ax.text(x + 0.46, y + 0.5, f"{v:g}", ha="center", va="center", color="white",
                        fontsize=8, fontweight="bold")
        ax.text(k * (len(values) + 1) + len(values) / 2, world + 0.1,
                "own" if k == 0 else f"after {k} rotation{'s' * (k > 1)}", ha="center", fontsize=9)
    for r in range(world):
        ax.text(-0.3, world - 1 - r + 0.5, f"rank {r}", ha="right", va="center", fontsize=9,
                color=_color(r))
    ax.set_xlim(-1.6, count * (len(values) + 1))
    ax.set_ylim(-0.1, world + 0.6)
    ax.axis("off")
    if title:
        ax.set_title(title, fontsize=11)
    return ax


def rtp_schedule(world_size, axes=None):
    """Two grids, step x rank: the weight shard each rank holds in forward (clockwise:
    s = (r - i) % N) and in backward (counterclockwise: s = (r + k) % N), with the
    gradient accumulator of that shard that rank r adds to and passes on."""
    n = world_size
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(2.2 + 2.4 * n, 0.9 + 0.6 * n))
    grids = (("forward: compute with W_s, rotate clockwise", lambda r, i: (r - i) % n, False),
             ("backward: W_s and acc_s rotate counterclockwise", lambda r, k: (r + k) % n, True))
    for ax, (title, shard, acc) in zip(axes, grids):
        for step in range(n):
            for r in range(n):
                s = shard(r, step)
                y = n - 1 - r
                ax.add_patch(FancyBboxPatch((step + 0.06, y + 0.1), 0.88, 0.8,
                                            boxstyle="round,pad=0.02", facecolor=_color(s),
                                            edgecolor="#333333"))
                text = f"W{s}" + (f"\nacc{s}" if acc else "")
                ax.text(step + 0.5, y + 0.5, text, ha="center", va="center", color="white",
                        fontsize=9, fontweight="bold")
            ax.text(step + 0.5, n + 0.05, f"step {step}", ha="center", va="bottom", fontsize=9)
        for r in range(n):
            ax.text(-0.1, n - 1 - r + 0.5, f"rank {r}", ha="right", va="center", fontsize=9)
        ax.set_xlim(-0.9, n + 0.05)
        ax.set_ylim(-0.1, n + 0.5)
        ax.set_title(title, fontsize=10)
        ax.axis("off")
    return axes


def rank_layout(world_size, tp_size, ax=None):
    """Ranks on a grid: row d = TP group d (replicas), column t = DP group t (shard t).
    rank = d * tp_size + t. Boxes are coloured by TP rank (the shard they hold)."""
    dp_size = world_size // tp_size
    if ax is None:
        _, ax = plt.subplots(figsize=(2.4 + 1.4 * tp_size, 1.2 + 1.0 * dp_size))
    for d in range(dp_size):
        y = dp_size - 1 - d
        ax.add_patch(FancyBboxPatch((-0.15, y + 0.05), tp_size + 0.3 - 0.1, 0.9,
                                    boxstyle="round,pad=0.04", facecolor="none",
                                    edgecolor="#333333", linestyle="-", linewidth=1.5))
        ax.text(tp_size + 0.25, y + 0.5, f"TP group {d}\n(replica {d})", va="center", fontsize=9)
        for t in range(tp_size):
            rank = d * tp_size + t
            ax.add_patch(Rectangle((t + 0.05, y + 0.18), 0.8, 0.64, facecolor=_color(t),
                                   edgecolor="#333333"))
            ax.text(t + 0.45, y + 0.5, f"rank {rank}", ha="center", va="center", color="white",
                    fontsize=9, fontweight="bold")
    for t in range(tp_size):
        ax.add_patch(Rectangle((t - 0.02, -0.05), 0.94, dp_size + 0.1, facecolor="none",
                               edgecolor=_color(t), linestyle="--", linewidth=1.5))
        ax.text(t + 0.45, -0.2, f"DP {t}", ha="center", va="top", fontsize=9, color=_color(t))
    ax.set_xlim(-0.4, tp_size + 1.6)
    ax.set_ylim(-0.9, dp_size + 0.2)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(f"{world_size} ranks, tp_size={tp_size}: rank = dp_rank * {tp_size} + tp_rank\n"
                 "rows: TP groups (one model replica each); dashed columns: DP groups", fontsize=9)
    return ax


def flat_shards(vectors, world_size, title="", ax=None):
    """`vectors`: [(label, [(piece label, elements), ...])]: each a flat vector made of its
    pieces (a parameter: one piece; an FSDP unit: its parameters), zero-padded at its end to
    N * S elements, S = ceil(P / N), and cut in N shards of S: element i belongs to rank
    i // S. One row per vector; thin lines between its pieces, padding hatched."""
    n = world_size
    sizes = [sum(e for _, e in pieces) for _, pieces in vectors]
    width = max(-(-p // n) * n for p in sizes)
    if ax is None:
        _, ax = plt.subplots(figsize=(min(14, 2.5 + 0.32 * width), 0.6 + 0.75 * len(vectors)))
    for row, ((label, pieces), total) in enumerate(zip(vectors, sizes)):
        y = len(vectors) - 1 - row
        shard = -(-total // n)
        for i in range(shard * n):
            pad = i >= total
            ax.add_patch(Rectangle((i, y + 0.15), 0.94, 0.6, facecolor=_color(i // shard),
                                   alpha=0.35 if pad else 1.0, hatch="///" if pad else None,
                                   edgecolor="#333333", linewidth=0.5))
        start = 0
        for name, elements in pieces:
            if len(pieces) > 1:
                ax.text(start + elements / 2, y + 0.82, name, ha="center", va="bottom", fontsize=7)
                ax.plot([start - 0.03] * 2, [y + 0.1, y + 0.8], color="black", linewidth=1.4)
            start += elements
        for r in range(1, n):
            ax.plot([r * shard - 0.03] * 2, [y + 0.02, y + 0.93], color="black", linewidth=2.2)
        ax.text(-0.4, y + 0.45, f"{label}\nP={total}, S={shard}", ha="right", va="center",
                fontsize=8)
    ax.set_xlim(-4.5, width + 0.5)
    ax.set_ylim(-0.1, len(vectors) + 0.15)
    ax.axis("off")
    handles = [Patch(facecolor=_color(r), label=f"rank {r}'s shard") for r in range(n)]
    handles.append(Patch(facecolor="white", hatch="///", edgecolor="#333333", label="padding (zeros)"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8)
    if title:
        ax.set_title(title, fontsize=11)
    return ax


def ring_attention_schedule(world_size, axes=None):
    """Two grids, step x rank: the block of keys and values (of rank s) each rank holds in
    forward (clockwise: s = (r - i) % N) and in backward (counterclockwise: s = (r + k) % N),
    with the accumulators dK_s, dV_s that rank r adds its queries' part to and passes on."""
    n = world_size
    if axes is None:
        _, axes = plt.subplots(1, 2, figsize=(2.2 + 2.6 * n, 0.9 + 0.65 * n))
    grids = (("forward: attend to K_s, V_s; rotate clockwise", lambda r, i: (r - i) % n, False),
             ("backward: K_s, V_s and dK_s, dV_s rotate counterclockwise",
              lambda r, k: (r + k) % n, True))
    for ax, (title, block, acc) in zip(axes, grids):
        for step in range(n):
            for r in range(n):
                s = block(r, step)
                y = n - 1 - r
                ax.add_patch(FancyBboxPatch((step + 0.06, y + 0.1), 0.88, 0.8,
                                            boxstyle="round,pad=0.02", facecolor=_color(s),
                                            edgecolor="#333333"))
                text = f"K{s} V{s}" + (f"\ndK{s} dV{s}" if acc else "")
                ax.text(step + 0.5, y + 0.5, text, ha="center", va="center", color="white",
                        fontsize=8, fontweight="bold")
            ax.text(step + 0.5, n + 0.05, f"step {step}", ha="center", va="bottom", fontsize=9)
        for r in range(n):
            ax.text(-0.1, n - 1 - r + 0.5, f"rank {r}\n(Q{r})", ha="right", va="center",
                    fontsize=9)
        ax.set_xlim(-1.0, n + 0.05)
        ax.set_ylim(-0.1, n + 0.5)
        ax.set_title(title, fontsize=10)
        ax.axis("off")
    return axes


def _owners(world_size, chunk, zigzag):
    """The rank holding each position of a sequence of 2N chunks of `chunk` tokens."""
    n, owner = world_size, []
    for c in range(2 * n):
        if zigzag:
            owner += [c if c < n else 2 * n - 1 - c] * chunk
        else:
            owner += [c // 2] * chunk
    return owner


def causal_work(world_size, chunk=2, axes=None):
    """The causal mask of 2N chunks of `chunk` tokens: query row i sees keys j <= i, each row
    coloured by the rank holding that query, for contiguous and zig-zag sharding; under each,
    every rank's number of unmasked (query, key) scores: its share of the work."""
    n = world_size
    size = 2 * n * chunk
    if axes is None:
        _, axes = plt.subplots(2, 2, figsize=(9.5, 7.2), gridspec_kw={"height_ratios": [3, 1]})
    for col, (zigzag, title) in enumerate(((False, "contiguous: rank r holds piece r"),
                                           (True, "zig-zag: rank r holds chunks r and 2N-1-r"))):
        owner = _owners(n, chunk, zigzag)
        ax = axes[0][col]
        for i in range(size):
            for j in range(i + 1):
                ax.add_patch(Rectangle((j, size - 1 - i), 1, 1, facecolor=_color(owner[i]),
                                       edgecolor="white", linewidth=0.5))
        for c in range(1, 2 * n):
            ax.axhline(size - c * chunk, color="#333333", linewidth=0.6)
            ax.axvline(c * chunk, color="#333333", linewidth=0.6)
        ax.set_xlim(0, size)
        ax.set_ylim(0, size)
        ax.set_aspect("equal")
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_xlabel("key position")
        ax.set_ylabel("query position (top: 0)")
        ax.set_title(title, fontsize=10)
        work = [sum(i + 1 for i in range(size) if owner[i] == r) for r in range(n)]
        bars = axes[1][col]
        bars.bar(range(n), work, color=[_color(r) for r in range(n)])
        bars.set_xticks(range(n))
        bars.set_xticklabels([f"rank {r}" for r in range(n)])
        bars.set_ylabel("unmasked scores")
        bars.set_title(f"most / least: {max(work) / min(work):.2f}", fontsize=9)
    return axes


# what travels along each dimension of a (dp, pp, tp) mesh, and how it is drawn
MESH_LINKS = {
    "tp": ("activations all-reduced in every block (E3)", dict(color="#C44E52", linewidth=3)),
    "pp": ("activations forward, their gradients back (E9)",
           dict(color="#4C72B0", linewidth=2, arrowstyle="<|-|>")),
    "dp": ("gradients averaged once a step (E1)", dict(color="#55A868", linewidth=2,
                                                          linestyle="--")),
}


def _mesh_coords(layout):
    """{rank: {dim: its index in its group along dim}} from {dim: [groups of global ranks]}."""
    coords = {}
    for dim, groups in layout.items():
        for group in groups:
            for i, rank in enumerate(group):
                coords.setdefault(rank, {})[dim] = i
    return coords


def device_mesh(layout, traffic=None, ax=None):
    """The ranks of a mesh with dims dp, pp, tp drawn as a cube (tp across, pp down, dp in
    depth), each group of a dimension joined by that dimension's link. `layout`: {dim: [[global
    ranks of one group], ...]}; `traffic` (optional): {dim: {operation: calls}} a run counted,
    with "other" for calls on no group of the mesh (listed under the picture, in red)."""
    coords = _mesh_coords(layout)
    if ax is None:
        _, ax = plt.subplots(figsize=(9, 5.2))

    def at(rank):
        c = coords[rank]
        return 2.6 * c["tp"] + 1.3 * c["dp"], -2.0 * c["pp"] + 1.0 * c["dp"]
    handles = []
    for dim, (what, style) in MESH_LINKS.items():
        style = dict(style)
        arrow = style.pop("arrowstyle", "-")
        for group in layout[dim]:
            for a, b in zip(group, group[1:]):
                ax.annotate("", xy=at(b), xytext=at(a), zorder=1,
                            arrowprops=dict(arrowstyle=arrow, shrinkA=22, shrinkB=22, **style))
        calls = ", ".join(f"{op} x {n}" for op, n in (traffic or {}).get(dim, {}).items())
        groups = " ".join("{" + ",".join(map(str, g)) + "}" for g in layout[dim])
        label = f"{dim} {groups}: {what}" + (f"; ran {calls}" if calls else "")
        handles.append(Line2D([], [], **style, label=label))
    for rank, c in coords.items():
        x, y = at(rank)
        ax.add_patch(FancyBboxPatch((x - 0.45, y - 0.3), 0.9, 0.6, boxstyle="round,pad=0.04",
                                    facecolor=_color(c["pp"]), edgecolor="#333333", zorder=2,
                                    alpha=1.0 if c["dp"] == 0 else 0.75))
        ax.text(x, y, f"rank {rank}\n({c['dp']},{c['pp']},{c['tp']})", ha="center",
                va="center", color="white", fontsize=8, fontweight="bold", zorder=3)
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.02), fontsize=8,
              frameon=False)
    other = (traffic or {}).get("other", {})
    if other:
        calls = "; ".join(f"{k} x {n}" for k, n in other.items())
        ax.set_xlabel(f"outside the mesh's groups: {calls}", color="#C44E52", fontsize=8)
    xs, ys = zip(*(at(r) for r in coords))
    ax.set_xlim(min(xs) - 0.8, max(xs) + 0.8)
    ax.set_ylim(min(ys) - 0.7, max(ys) + 0.7)
    ax.set_aspect("equal")
    ax.set_xticks([])
    ax.set_yticks([])
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set_title("DeviceMesh (dp, pp, tp): rank (dp, pp, tp), coloured by pipeline stage; the back "
                 "face is replica dp = 1", fontsize=9)
    return ax
