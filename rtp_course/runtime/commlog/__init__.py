"""Record the communication done by the code under test.

`install()` wraps the torch.distributed functions (in both `torch.distributed`
and `distributed_c10d`, before the code under test is imported) so that each
call logs an event: kind, bytes this rank sends or receives, the phase the
checker is in, and the caller's line in the exercise code. While a call is in
progress the `status` callback is told, so the checker's watchdog can say
which rank waited in which call. Buffers filled by recv/irecv are tracked
until freed: that is how a check measures how many shards a rank holds.
A check that sets `STATE.trace = []` also gets the order of calls and of
wait()s on their handles (and may add its own markers, e.g. compute), which
shows whether compute happened while a transfer was in flight. An event's
`completed` says whether its handle was waited (or reported done by
is_completed()), and `STATE.sent_to` / `recv_from` count the sends and receives
posted to and from each peer: the watchdog names a transfer whose peer never
posted its half.

Every call and wait is also kept in program order (`program()`, with each call's group),
which the parent replays under NCCL's stream order (runtime/nccl/order.py).
`STATE.nccl_rules` (set on gloo by the launcher) makes gloo behave as NCCL where the two
differ (runtime/nccl/calls.py): so a grade computed on CPU is the grade a GPU run gives.

    api.py    every communicating function of torch.distributed, and its operation
    state.py  the check's events, program and status (STATE), and the caller's line
    works.py  a logged asynchronous handle
    wrap.py   the wrappers, and install()
"""
from __future__ import annotations

from rtp_course.runtime.commlog.api import C10D, FUNCOL, INDIRECT, NEWER_TORCH, P2P, RECEIVES
from rtp_course.runtime.commlog.state import STATE, Event, caller
from rtp_course.runtime.commlog.wrap import install
from rtp_course.runtime.nccl.calls import RULE, NCCLRuleError

__all__ = ["C10D", "FUNCOL", "INDIRECT", "NEWER_TORCH", "P2P", "RECEIVES", "STATE", "Event",
           "caller", "install", "reset", "set_phase", "events", "program", "unlogged", "RULE",
           "NCCLRuleError"]

def reset(phase: str = "setup") -> None:
    STATE.phase = phase
    STATE.events = []
    STATE.program = []
    STATE.peak_recv = {}
    STATE.sent_to = {}
    STATE.recv_from = {}
    STATE.unwaited_to = {}
    STATE.dropped_to = {}
    STATE.dropped_works = []
    STATE.collectives = {}
    STATE.trace = None


def set_phase(phase: str) -> None:
    STATE.phase = phase
    STATE.peak_recv.setdefault(phase, STATE.live_recv)


def events() -> list[Event]:
    return list(STATE.events)


def program() -> dict:
    """This check's calls and waits in the order they happened, as runtime/nccl/order.py
    replays them: {"steps": [["post", i] | ["wait", [i, ...]]], "ops": [op, ...]}."""
    ops = [{"id": i, "family": e.family, "group": e.group, "members": list(e.members),
            "peer": e.peer, "batch": e.batch, "where": e.where, "nbytes": e.nbytes}
           for i, e in enumerate(STATE.events)]
    return {"steps": [list(step) for step in STATE.program], "ops": ops}


class unlogged:
    """Calls made inside are the harness's own: torch's functions, never logged."""

    def __enter__(self):
        self.depth = getattr(STATE.local, "depth", 0)
        STATE.local.depth = 1

    def __exit__(self, *exc):
        STATE.local.depth = self.depth
