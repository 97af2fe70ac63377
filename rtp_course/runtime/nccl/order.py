"""Would this run deadlock on NCCL? NCCL's stream order, replayed on the calls gloo completed.

Gloo runs each operation as soon as its peers are there; NCCL queues a rank's operations
on a process group in the order they were posted, on ONE CUDA stream per group (torch 2.9+,
groups made with `device_id`, as the course makes them: ProcessGroupNCCL.pointToPoint uses
the group's own communicator for point-to-point too), and an operation there runs only
once it reaches the head of that stream on every rank it involves. NCCL's contract for
point-to-point is a rendezvous: a send may wait until its receive runs ("ncclSend ... is
blocking for the GPU; operations that need to progress concurrently must be grouped"), and
only the operations of one `batch_isend_irecv` progress together. The checker's GPU run
waits with TORCH_NCCL_BLOCKING_WAIT=1: wait() blocks the host until the operation is done.

So code that gloo completes can hang on a GPU: a separate irecv then isend on two ranks
(each stream holds a receive first), a ring of unbatched sends, a collective posted before
a receive that another rank posts after it. `simulate(programs)` replays each rank's
recorded program (commlog.program: posts and waits, in order) under those rules and says
where it would stop.

A program is a list of steps: ("post", op) or ("wait", [op, ...]); an op is a dict with
"id", "family" (all_reduce, isend, ...), "group" (its name), "members" (global ranks),
"peer" (a global rank, point-to-point only), "batch" (the batch it was posted in, or None).
An op whose group is unknown ("?") is left out: the rules judge only what they can see.
"""
from __future__ import annotations

import time
from collections import defaultdict, deque

SENDS, RECVS = ("send", "isend"), ("recv", "irecv")
P2P = SENDS + RECVS
REPLAY_CPU = 5.0        # CPU-s one replay may take: a check's hundreds of calls take milliseconds


class ReplayTooLong(RuntimeError):
    """The replay used REPLAY_CPU: more operations, in a worse order, than a check makes."""


class _Rank:
    def __init__(self, rank: int, program: list, ops: dict):
        self.rank, self.steps, self.ops, self.pc = rank, list(program), ops, 0
        self.blocked_on: list = []


def _entries(rank: int, program: list, ops: dict) -> list:
    """The rank's posts in order, a batch of point-to-point operations as one entry."""
    out, batch = [], {}
    for kind, what in program:
        if kind != "post":
            continue
        op = ops[what]
        if op.get("batch") is not None and op["family"] in P2P:
            key = (op["group"], op["batch"])
            if key in batch:
                batch[key]["ops"].append(op)
                continue
            entry = {"kind": "p2p", "group": op["group"], "ops": [op], "first": what}
            batch[key] = entry
            out.append(entry)
        elif op["family"] in P2P:
            out.append({"kind": "p2p", "group": op["group"], "ops": [op], "first": what})
        else:
            out.append({"kind": "coll", "group": op["group"], "ops": [op], "first": what})
    return out


# NCCL rule 'stream order' (DESIGN.md)
def simulate(programs: dict) -> dict | None:
    """`programs`: {rank: (steps, {op id: op})}. None if every rank's program runs to its end
    under NCCL's rules; else {rank: the op it waits for (or None: it finished)} and the ops
    at the head of each rank's streams, for the report."""
    ranks = {r: _Rank(r, steps, ops) for r, (steps, ops) in programs.items()}
    streams = {r: defaultdict(deque) for r in ranks}        # rank -> group -> entries
    entry_of = {}                                           # (rank, op id) -> entry
    done = set()                                            # (rank, op id)
    for r, st in ranks.items():
        for e in _entries(r, st.steps, st.ops):
            if e["group"] == "?":
                for op in e["ops"]:
                    done.add((r, op["id"]))
                continue
            e["posted"] = False
            for op in e["ops"]:
                entry_of[(r, op["id"])] = e
    until = time.process_time() + REPLAY_CPU
    while True:
        moved = _run_hosts(ranks, streams, entry_of, done)
        moved |= _complete(ranks, streams, done, until)
        if not moved:
            break
    stuck = {r: st.blocked_on for r, st in ranks.items() if st.pc < len(st.steps)}
    if not stuck:
        return None
    heads = {r: {g: list(q)[0]["ops"] for g, q in streams[r].items() if q} for r in ranks}
    return {"waiting": {r: stuck.get(r) for r in ranks}, "heads": heads}


def _run_hosts(ranks, streams, entry_of, done) -> bool:
    """Advance every rank's host until it blocks in a wait; True if anything moved."""
    moved = False
    for r, st in ranks.items():
        while st.pc < len(st.steps):
            kind, what = st.steps[st.pc]
            if kind == "post":
                e = entry_of.get((r, what))
                if e is not None and not e["posted"]:
                    e["posted"] = True
                    streams[r][e["group"]].append(e)
            else:
                waiting = [i for i in what if (r, i) not in done and (r, i) in entry_of]
                if waiting:
                    st.blocked_on = [st.ops[i] for i in waiting]
                    break
            st.pc += 1
            st.blocked_on = []
            moved = True
    return moved


def _complete(ranks, streams, done, until: float) -> bool:
    """Complete what can run now at the heads of the streams; True if anything did."""
    moved = False
    for group in {g for r in ranks for g, q in streams[r].items() if q}:
        if time.process_time() > until:
            raise ReplayTooLong(f"the replay took over {REPLAY_CPU:.0f} CPU-s")
        heads = {r: streams[r][group][0] for r in ranks if streams[r][group]}
        for r in _collectives_ready(heads):
            for op in heads[r]["ops"]:
                done.add((r, op["id"]))
        moved |= _p2p_matches(heads, done, until)
        for r, e in heads.items():           # an entry leaves its stream once all of it ran
            if all((r, op["id"]) in done for op in e["ops"]):
                streams[r][group].popleft()
                moved = True
    return moved


def _collectives_ready(heads) -> set:
    """The ranks whose head is a collective that every member of its group has at its head."""
    colls = {r: e for r, e in heads.items() if e["kind"] == "coll"}
    if not colls:
        return set()
    members = set(next(iter(colls.values()))["ops"][0]["members"])
    if not members <= set(colls):
        return set()
    families = {colls[r]["ops"][0]["family"] for r in members}
    return members if len(families) == 1 else set()


def _p2p_matches(heads, done, until: float) -> bool:
    """Complete the sends and receives that meet at the heads: a send of rank A to B runs with
    B's receive from A when both are in the entries at the heads of their streams (one
    operation, or a batch, whose operations progress together), matched in the order they
    were posted. A rank's send to itself needs its receive in the same batch. True if any
    completed."""
    pending = {r: [op for op in e["ops"] if (r, op["id"]) not in done]
               for r, e in heads.items() if e["kind"] == "p2p"}
    moved = False
    for a, ops in pending.items():
        for op in ops:
            if time.process_time() > until:
                raise ReplayTooLong(f"the replay took over {REPLAY_CPU:.0f} CPU-s")
            b = op["peer"]
            if op["family"] not in SENDS or (a, op["id"]) in done or b not in pending:
                continue
            if b == a and len(heads[a]["ops"]) == 1:
                continue
            match = _first_pending(pending[b], a, RECVS, b, done)
            if match is not None and _first_pending(pending[a], b, SENDS, a, done) is op:
                done.add((a, op["id"]))
                done.add((b, match["id"]))
                moved = True
    return moved


def _first_pending(ops, peer, families, rank, done):
    """The earliest not-yet-done operation of `families` with `peer`: a pair's sends and
    receives are matched in the order they were posted (NCCL ignores tags)."""
    return next((q for q in ops if q["family"] in families and q["peer"] == peer
                 and (rank, q["id"]) not in done), None)


def size_mismatch(programs: dict) -> dict | None:
    """The first send whose receive holds another number of bytes: the k-th send of rank A to
    B meets B's k-th receive from A (on one group), and NCCL needs the same count on both
    sides (gloo fills part of a larger buffer, or aborts). None if every pair agrees."""
    posted = defaultdict(list)                 # (group, sender, receiver, kind) -> [op]
    for r, (steps, ops) in programs.items():
        for kind, what in steps:
            op = ops.get(what) if kind == "post" else None
            if op is None or op["family"] not in P2P or op.get("nbytes") is None:
                continue
            send = op["family"] in SENDS
            key = (op["group"], r if send else op["peer"], op["peer"] if send else r, send)
            posted[key].append((r, op))
    for (group, a, b, send), sends in sorted(posted.items(), key=lambda kv: str(kv[0])):
        if not send or group == "?":
            continue
        for (ra, s_op), (rb, r_op) in zip(sends, posted.get((group, a, b, False), [])):
            if s_op["nbytes"] != r_op["nbytes"]:
                return {"sender": ra, "send": s_op, "receiver": rb, "recv": r_op}
    return None


def describe(found: dict, rank_names=None) -> str:
    """The report's sentence for a simulate() result: what each rank would wait for."""
    parts = []
    for r, waiting in sorted(found["waiting"].items()):
        if not waiting:
            parts.append(f"rank {r} finishes")
            continue
        op = waiting[0]
        heads = found["heads"].get(r, {})
        ahead = heads.get(op["group"], [])
        what = _name(op)
        if ahead and ahead[0]["id"] != op["id"]:
            parts.append(f"rank {r} waits for its {what}, queued behind its {_name(ahead[0])}")
        else:
            parts.append(f"rank {r} waits for its {what}")
    return "; ".join(parts)


def _name(op: dict) -> str:
    where = f" ({op['where']})" if op.get("where") else ""
    if op["family"] in SENDS:
        return f"{op['family']} to rank {op['peer']}{where}"
    if op["family"] in RECVS:
        return f"{op['family']} from rank {op['peer']}{where}"
    return f"{op['family']}{where}"
