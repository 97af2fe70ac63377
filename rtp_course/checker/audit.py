"""A rank's communication log, held against what the relay saw it send and receive.

A rank logs each torch.distributed call it makes (runtime/commlog.py), with the phase of
the check it was in and the line that made it: what the communication rules read. The log
lives in the rank's own memory, so code under test can change it. The relay
(runtime/relay) keeps its own account, outside the rank, of every operation the rank
posted. `verify` walks the two in order: every operation the relay carried must be the
one a logged call makes (the same operation, the same peer), and every logged call must
have reached the relay. What was carried and not logged (a forged log, a C++ method of a
process group called directly), or logged and never carried (a made-up entry), fails
the check. The verified log then carries the relay's byte counts, not the rank's.

The phase of a call is still the rank's word: a rank can move its traffic between the
phases (and checks) it reports, never hide it.
"""
from __future__ import annotations

from rtp_course.runtime import commlog

# What a logged call makes at the relay: (relay operations it may make, how many at least,
# at most). Most calls make exactly one operation of their family.
_MANY = 1 << 20
_OBJECTS = {           # pickled objects: their sizes, then their bytes
    "broadcast_object_list": ({"broadcast"}, 2, 2),
    "all_gather_object": ({"all_gather"}, 2, 2),
    "gather_object": ({"all_gather", "gather"}, 2, 2),
    "scatter_object_list": ({"scatter", "broadcast"}, 2, 3),
    "send_object_list": ({"send"}, 2, 2),
    "recv_object_list": ({"recv"}, 2, 2),
    "_broadcast_coalesced": ({"broadcast"}, 0, _MANY),    # one per bucket
}
_RELAY_FAMILY = {"isend": "send", "irecv": "recv", "permute": "all_to_all"}
RULE = ("every transfer goes through a torch.distributed call the code makes (a function of "
        "torch.distributed or its functional collectives), and the relay that carries it "
        "between the ranks must see the same calls as the rank's log")


def _slot(event: dict) -> tuple:
    kind, family = event.get("kind", ""), event.get("family", "")
    name = kind.rsplit(".", 1)[-1]
    if name in _OBJECTS and not kind.startswith("funcol."):
        return _OBJECTS[name]
    return ({_RELAY_FAMILY.get(family, family)}, 1, 1)


def _describe(op: dict) -> str:
    peer = f" {'to' if op['family'] == 'send' else 'from'} rank {op['peer']}" \
        if op.get("peer") is not None else ""
    return (f"{op['family']}{peer} of {op['bytes']} bytes on the group of ranks "
            f"{op['group']}")


def verify(events: list, carried: list) -> tuple[list, str | None, str]:
    """(the log with the relay's bytes and peers, None, "") when the two agree, else (events,
    what differs, in which phase). `events`: the rank's logged calls (commlog.Event dicts),
    `carried`: the relay's operations for that rank and check, both in the order made."""
    verified, j = [], 0
    for i, e in enumerate(events):
        if e.get("family") == "library":   # torch's DDP: its reducer's calls are not logged
            return events, (f"{e.get('kind')} (at {e.get('where', '?')}) communicates in C++, "
                            f"where the log cannot follow it"), e.get("phase", "")
        families, low, high = _slot(e)
        taken = []
        while j < len(carried) and len(taken) < high and carried[j]["family"] in families:
            taken.append(carried[j])
            j += 1
        if len(taken) < low:
            return events, *_divergence(events, i, carried, j - len(taken))
        if e.get("family") in commlog.P2P and taken and taken[0].get("peer") != e.get("peer"):
            return events, (f"the log says {e.get('kind')} with rank {e.get('peer')} "
                            f"({e.get('where', '?')}), and the relay carried "
                            f"{_describe(taken[0])}"), e.get("phase", "")
        v = dict(e)
        if taken:
            v["nbytes"] = sum(op["bytes"] for op in taken)
        verified.append(v)
    if j < len(carried):
        return events, _unlogged(carried[j]), carried[j].get("phase", "")
    return verified, None, ""


def _unlogged(op: dict) -> str:
    return (f"the relay carried {_describe(op)} (phase '{op.get('phase', '?')}') that no "
            f"torch.distributed call in the rank's log accounts for")


def _divergence(events: list, i: int, carried: list, j: int) -> tuple[str, str]:
    """Where log entry i and relay operation j part: an operation nobody logged (the log's
    entry matches a later operation) or an entry that was never carried."""
    e = events[i]
    families = _slot(e)[0]
    later = next((k for k in range(j, len(carried)) if carried[k]["family"] in families), None)
    if j < len(carried) and later is not None and later > j:
        return _unlogged(carried[j]), carried[j].get("phase", "")
    got = f"the relay saw {_describe(carried[j])} instead" if j < len(carried) \
        else "the relay saw nothing more from this rank"
    return (f"the log says {e.get('kind')} was called ({e.get('where', '?')}, phase "
            f"'{e.get('phase')}'), and {got}"), e.get("phase", "")
