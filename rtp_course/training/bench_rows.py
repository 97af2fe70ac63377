"""Which workload each row of `rtp-course bench` trains (training/workloads.py): the course
model under a strategy, or, for E9's and E10's rows, a model of their own."""
from __future__ import annotations

from rtp_course.training import expert_rows, pipeline_rows
from rtp_course.training.workloads import Workload

OWN = {**pipeline_rows.ROWS, **expert_rows.ROWS}      # the rows with models of their own
NAMES = tuple(OWN)


def workload(strategy, opts, device) -> Workload:
    return OWN.get(strategy, Workload)(strategy, opts, device)


def baselines(names) -> dict:
    """{row: the row its "vs DDP" ratio is taken against (None: none)} for the own rows."""
    return {n: OWN[n].baseline for n in names if n in OWN}


def with_baselines(names) -> list:
    """`names` without repeats, each own row's baseline put before it when missing
    (ep: ep_ddp, the same MoE layer under DDP)."""
    out = []
    for n in dict.fromkeys(names):
        base = baselines([n]).get(n)
        if base and base not in out and base not in names:
            out.append(base)
        if n not in out:
            out.append(n)
    return out
