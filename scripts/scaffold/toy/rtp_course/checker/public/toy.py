"""Public checks for E0 `toy`: every rank feeds its own [6] vector to `total`, which must return
the group's sum with one all-reduce.

A check's `run` runs in every rank with the code under test; `expected` and `comm_rules` run in
the parent with serial torch only (rtp_course/checker/registry.py).
"""
from __future__ import annotations

from rtp_course.checker.common import randn
from rtp_course.checker.registry import Check, CommRule


class TotalCheck(Check):
    """Each rank feeds its own [6] vector and records what total returns."""
    exercise, name = 'toy', 'total'
    hints = {"total/output": "every rank returns the sum of all the ranks' x: all-reduce a copy",
             "total/x after": "x is the caller's: all-reduce a copy of it (x.clone()), not x"}

    def run(self, ctx):
        x = ctx.to(randn(1, 6, owner=ctx.rank))
        with ctx.phase('total'):
            out = ctx.impl.toy.total(x, group=ctx.group)
        ctx.record("total/output", out)
        ctx.record("total/x after", x)

    def expected(self, world_size):
        s = sum(randn(1, 6, owner=r) for r in range(world_size))
        return {r: {"total/output": s, "total/x after": randn(1, 6, owner=r)}
                for r in range(world_size)}

    def comm_rules(self, world_size):
        return [CommRule('total', "*", 1, "rule 'Communication': total makes one all-reduce, "
                         "and nothing else")]
