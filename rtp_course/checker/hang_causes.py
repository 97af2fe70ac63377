"""The hint for a hang chosen by what the ranks were doing, not by which check it was.

Each rank's status file says the call it is blocked in (its family and peer) and how
many sends and receives it posted to and from each peer during the check (and how many
of its sends it has not waited yet), so common deadlocks can be told apart from the
rest: a transfer whose peer never posted its half (a wrong direction or peer, a
forgotten isend or irecv), a send whose work was dropped unwaited, and a ring of
blocking sends with no receive posted anywhere.
"""
from __future__ import annotations

BLOCKING_SENDS = ("every rank is blocked in a blocking dist.send, and no rank has posted a "
                  "receive: gloo's send returns only when the peer receives. Post the receive "
                  "and the send together (dist.irecv + dist.isend, or dist.batch_isend_irecv), "
                  "then wait")
WAITED_AGAIN = ("a work that was already waited on is waited on again (the call above says "
                "'wait() again'): with gloo, a second wait() on a finished work can block for "
                "ever. Forget the works once waited (keep only the result), so a second wait() "
                "returns at once")
RECEIVES, SENDS = ("recv", "irecv"), ("send", "isend")


def _left_out(done: list, blocked: dict) -> str:
    calls = sorted({str(st.get("family") or st.get("call", "")).split(" ")[0]
                    for st in blocked.values()})
    return (f"rank(s) {', '.join(map(str, done))} finished this check while the others wait in "
            f"{', '.join(calls)}: a collective that the finished ranks never join. A collective "
            f"called without group= runs over the whole world, so ranks outside the subgroup "
            f"are waited for forever: pass `group` to every collective (or some ranks skip a "
            f"collective the others make)")


def _count(status: dict, what: str, peer: int) -> int:
    return int((status.get(what) or {}).get(str(peer), 0))


def _unmatched(r: int, st: dict, mine: dict) -> str:
    """Why rank r's blocked transfer has no partner, if its peer's status shows it."""
    peer_rank = st.get("peer")
    receiving = st.get("family") in RECEIVES
    if not (receiving or st.get("family") in SENDS) or not isinstance(peer_rank, int):
        return ""
    peer = mine.get(peer_rank)
    if peer is None:
        return ""
    half, theirs = ("send", "sent_to") if receiving else ("receive", "recv_from")
    if not _count(peer, theirs, r):
        others = sorted(k for k in (peer.get(theirs) or {}) if k != str(r))
        went = (f"its {half}s {'went to' if receiving else 'came from'} rank(s) "
                f"{', '.join(others)}" if others else f"it posted no {half} at all")
        verb = "receive from" if receiving else "have its send received by"
        return (f"rank {r} waits to {verb} rank {peer_rank}, but rank {peer_rank} never posted "
                f"a {half} {'to' if receiving else 'from'} rank {r} in this check ({went}): every "
                f"transfer needs its other half on the peer. Check the direction of each peer, "
                f"and that both the isend and the irecv are posted")
    if receiving and _count(peer, "unwaited_to", r) and peer.get("family") not in SENDS:
        return (f"rank {r} waits to receive from rank {peer_rank}, which posted the send but "
                f"never waited on its work (and is no longer waiting for it): a send whose "
                f"work is dropped unwaited may never be delivered (gloo). wait() on EVERY work "
                f"you start, the send's as well as the receive's")
    return ""


COMPUTING = ("no rank was inside a communication call when the time ran out: the code computed "
             "or looped all along. An endless loop, or a loop that polls is_completed() without "
             "ever calling wait() (gloo's point-to-point works only progress inside wait())")


def hint_for(check_id: str, statuses: dict) -> str:
    """A hint when the ranks' statuses show the cause of the hang; empty if they do not."""
    mine = {r: st for r, st in statuses.items() if st and st.get("check") == check_id}
    blocked = {r: st for r, st in mine.items() if st.get("call") and st.get("phase") != "done"}
    running = [st for st in mine.values() if st.get("phase") != "done"]
    if running and not blocked and len(mine) == len(statuses):
        return COMPUTING
    if any(str(st.get("call", "")).startswith("wait() again") for st in blocked.values()):
        return WAITED_AGAIN
    done = sorted(r for r, st in mine.items() if st.get("phase") == "done")
    # dist.new_group is collective over the whole job, whatever its ranks: ranks waiting in it
    # while others finished made the calls in another order or number (the check's own hint)
    if done and blocked and all(st.get("family") not in RECEIVES + SENDS
                                and not str(st.get("call", "")).startswith("dist.new_group")
                                for st in blocked.values()):
        return _left_out(done, blocked)
    if blocked and len(blocked) == len(mine) and all(
            st.get("family") == "send" and not st.get("recv_from") for st in blocked.values()):
        return BLOCKING_SENDS
    for r, st in sorted(blocked.items()):
        why = _unmatched(r, st, mine)
        if why:
            return why
    return ""
