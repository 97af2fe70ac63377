"""`rtp-course bench`: run the benchmark (training/bench.py measures), then write what it
found under --out: the table (stdout and bench.txt), bench.csv, bench.png and, with --json,
every figure. The picture is the notebooks' own memory plot (notebook/plots.py): the command
line, above both, joins them; the benchmark itself draws nothing.
"""
from __future__ import annotations

import sys
from pathlib import Path

from rtp_course.course import todo
from rtp_course.notebook.plots import memory_bars
from rtp_course.runtime.launcher import LaunchError, RankFailed
from rtp_course.training import bench
from rtp_course.training.strategies import LABELS


def figure(rows, info, path):
    """Stacked bars of rank 0's memory by category, and the step time, per strategy."""
    import matplotlib
    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    ok = [r for r in bench.rank0(rows) if r["status"] == "ok"]
    labels = [LABELS[r["strategy"]] for r in ok]
    fig, (left, right) = plt.subplots(1, 2, figsize=(4 + 2.2 * len(ok), 4.6),
                                      gridspec_kw=dict(width_ratios=[3, 2]))
    memory_bars({lab: {c: r[c] for c in bench.CATEGORIES} for lab, r in zip(labels, ok)},
                ax=left, categories=bench.CATEGORIES,
                title=f"memory per rank (rank 0 of {info['world_size']})")
    if any(r.get("cuda_max_allocated") for r in ok):
        left.scatter(labels, [r["cuda_max_allocated"] for r in ok], marker="_", s=900,
                     color="black", label="cuda max allocated", zorder=3)
        left.legend(fontsize=8)
    paired = info.get("timing") or {}
    right.bar(labels, [1000 * (paired[r["strategy"]]["median_s"] if r["strategy"] in paired
                               else bench.slowest_step(rows, r["strategy"])) for r in ok],
              color="#4C72B0")
    right.set_ylabel("ms per step (median, slowest rank)")
    right.set_title(f"step time, {info['backend']}")
    models = {}                           # rows that train models of their own, by model
    for r in (r for r in ok if r.get("about")):
        models.setdefault(r["model"], []).append(LABELS[r["strategy"]])
    own = "; ".join(f"{m}: {', '.join(labels)}" for m, labels in models.items())
    fig.suptitle(f"{info['task'].model}: {info['num_params'] / 1e6:.2f} M parameters, "
                 f"{info['world_size']} ranks" + (f"; own models, {own}" if own else ""),
                 fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def cli_bench(args) -> int:
    """`rtp-course bench`: 0 when every strategy ran, 1 if one failed or was skipped."""
    try:
        rows, info = bench.run_bench(args)
    except RankFailed as e:
        print(f"rtp-course bench: {todo.from_traceback(e.traceback) or e}", file=sys.stderr)
        return 1
    except (LaunchError, ValueError) as e:
        print(f"rtp-course bench: {e}", file=sys.stderr)
        return 1
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = bench.report(rows, info)
    print(text)
    (out / "bench.txt").write_text(text + "\n")
    bench.write_csv(rows, out / "bench.csv")
    if any(r["status"] == "ok" for r in rows):
        figure(rows, info, out / "bench.png")
    if args.json:
        bench.write_json(rows, info, args.json)
    print(f"wrote {out / 'bench.csv'}, {out / 'bench.png'}, {out / 'bench.txt'}"
          + (f", {args.json}" if args.json else ""))
    return 0 if all(r["status"] == "ok" for r in rows) else 1
