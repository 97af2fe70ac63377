"""The relay (runtime/relay) and the audit (checker/audit), in one process.

Each rank here is a socket end speaking the wire protocol by hand: what a rank's process
group sends, and what hostile code in a rank could send instead.
"""
import select
import struct

import pytest
import torch

from rtp_course.checker import audit
from rtp_course.runtime.relay import server, wire


class FakeRank:
    def __init__(self, sock, rank):
        self.sock, self.rank, self.ids = sock, rank, 0
        self.stream = sock.makefile("rb", buffering=0)
        sock.settimeout(5)

    def post(self, header, tensors=()):
        self.ids += 1
        for buf in wire.encode(dict(header, id=self.ids), tensors):
            self.sock.sendall(buf)
        return self.ids

    def close(self):
        self.stream.close()
        self.sock.close()

    def reply(self):
        header, payload = wire.read_frame(self.stream)
        return header, wire.tensors_of(header, payload)


@pytest.fixture
def relay():
    made = []

    def start(world_size, inputs=None):
        r = server.Relay(world_size, inputs).start()
        made.append(r)
        ranks = [FakeRank(s, i) for i, s in enumerate(r.rank_ends())]
        return r, ranks
    yield start
    for r in made:
        r.stop(drain=0)


GROUP = {"g": "0,1#1", "m": [0, 1]}


def test_an_all_reduce_is_summed_and_accounted(relay):
    r, (a, b) = relay(2)
    a.sock.sendall(b"".join(wire.encode({"op": "mark", "check": 0, "phase": "forward"})))
    b.sock.sendall(b"".join(wire.encode({"op": "mark", "check": 0, "phase": "forward"})))
    a.post({"op": "all_reduce", "red": "SUM", **GROUP}, [torch.tensor([1.0, 2.0])])
    b.post({"op": "all_reduce", "red": "SUM", **GROUP}, [torch.tensor([10.0, 20.0])])
    for rank in (a, b):
        header, (got,) = rank.reply()
        assert "error" not in header and got.tolist() == [11.0, 22.0]
    assert r.account.of(0, 0) == [{"family": "all_reduce", "group": [0, 1], "peer": None,
                                   "phase": "forward", "bytes": 8}]


def test_mismatched_collectives_fail_every_member_and_the_report_says_how(relay):
    """A rank learns THAT the ranks' calls differ, never what another rank posted (that would
    carry data from rank to rank); the account keeps it for the report."""
    r, (a, b) = relay(2)
    a.post({"op": "all_reduce", "red": "SUM", **GROUP}, [torch.zeros(3)])
    b.post({"op": "all_reduce", "red": "SUM", **GROUP}, [torch.zeros(4)])
    for rank in (a, b):
        header, _ = rank.reply()
        assert header["error"] == "the ranks' all_reduce calls do not match (relay note 1)"
    assert r.account.notes[1] == "rank 0 gave a float32 [3] tensor, rank 1 gave a float32 [4] tensor"
    from rtp_course.checker.verdict import _noted
    assert _noted(header["error"], r.account.notes) == (
        "the ranks' all_reduce calls do not match: rank 0 gave a float32 [3] tensor, rank 1 "
        "gave a float32 [4] tensor")


def test_a_send_completes_when_its_receive_is_posted(relay):
    _, (a, b) = relay(2)
    a.post({"op": "send", "peer": 1, **GROUP}, [torch.arange(3.0)])
    ready, _, _ = select.select([a.sock], [], [], 0.3)
    assert not ready                              # no receive yet: the send waits (as NCCL's)
    b.post({"op": "recv", "peer": 0, "want": [["float32", [3]]], **GROUP})
    assert "error" not in a.reply()[0]
    assert b.reply()[1][0].tolist() == [0.0, 1.0, 2.0]


def test_a_receive_of_another_size_is_named(relay):
    r, (a, b) = relay(2)
    a.post({"op": "send", "peer": 1, **GROUP}, [torch.zeros(18, dtype=torch.float64)])
    b.post({"op": "recv", "peer": 0, "want": [["float64", [36]]], **GROUP})
    told = b.reply()[0]["error"]
    assert told == "a send and its receive buffer differ in size (relay note 1)"
    assert r.account.notes[1] == ("rank 0 sent rank 1 18 elements (float64 [18]), and rank 1's "
                                  "receive buffer holds 36 (float64 [36])")


def test_garbage_ends_that_rank_and_fails_what_waits_for_it(relay):
    r, (a, b) = relay(2)
    b.post({"op": "all_reduce", "red": "SUM", **GROUP}, [torch.zeros(2)])
    a.sock.sendall(struct.pack("<IQ", 12, 5) + b"not a header" + b"12345")
    header, _ = b.reply()
    assert header["error"].startswith("rank 0 ended before this operation completed")
    assert "not an operation" in r.account.broken[0]
    b.post({"op": "sync", "name": "done 0"})     # nor can a later one wait for it
    assert "rank 0 ended" in b.reply()[0]["error"]


@pytest.mark.parametrize("prefix", [struct.pack("<IQ", 10, 1 << 40),          # a 1 TB payload
                                    struct.pack("<IQ", 1 << 30, 0)])          # a 1 GB header
def test_a_frame_too_large_is_refused_before_it_is_read(relay, prefix):
    r, (a, _) = relay(2)
    a.sock.sendall(prefix)
    a.sock.settimeout(2)
    assert a.sock.recv(1) == b""                  # the relay hung up
    assert "not an operation" in r.account.broken[0]


def test_a_rank_that_does_not_read_its_replies_is_ended(relay, monkeypatch):
    monkeypatch.setattr(server, "MAX_UNREAD", 1 << 16)
    r, (a, b) = relay(2)
    with pytest.raises(OSError):                  # 16 KB back for each: never read
        for _ in range(40):
            a.post({"op": "all_gather", **GROUP}, [torch.zeros(1024, dtype=torch.float64)])
            b.post({"op": "all_gather", **GROUP}, [torch.zeros(1024, dtype=torch.float64)])
    r.stop(drain=1)
    assert "it left more than 0 MB sent to it unread" in " ".join(r.account.broken.values())


def test_the_harness_sync_says_which_rank_differs_never_the_text(relay):
    _, (a, b) = relay(2)
    a.post({"op": "same", "name": "same 3", "text": "[[0, 1]]"})
    b.post({"op": "same", "name": "same 3", "text": "secret data of rank 1"})
    ha, hb = a.reply()[0], b.reply()[0]
    assert ha["differs"] == 1 and hb["differs"] == 0
    assert "secret" not in str(ha)


def test_inputs_are_served_to_their_owner_only(relay):
    asked = []

    class Inputs:
        def serve(self, rank, request, check):
            asked.append((rank, request["owner"]))
            if rank not in request["owner"]:
                raise ValueError("a rank gets only its own")
            return {}, [torch.ones(2)]
    _, (a, b) = relay(2, Inputs())
    a.post({"op": "input", "what": "randn", "owner": [1]})
    assert a.reply()[0]["error"] == "input refused: a rank gets only its own"
    b.post({"op": "input", "what": "randn", "owner": [1]})
    assert b.reply()[1][0].tolist() == [1.0, 1.0]
    assert asked == [(0, [1]), (1, [1])]       # the rank is the connection's, not a claim


# ---- the audit: a rank's log against the relay's account ----

def event(kind, family, phase="forward", nbytes=16, peer=None, where="comm.py:31 in forward"):
    return {"kind": kind, "family": family, "phase": phase, "nbytes": nbytes, "peer": peer,
            "where": where}


def op(family, nbytes=16, peer=None):
    return {"family": family, "group": [0, 1], "peer": peer, "bytes": nbytes, "phase": "forward"}


def test_a_faithful_log_passes_with_the_relays_bytes():
    log = [event("all_gather_into_tensor", "all_gather", nbytes=0),
           event("isend", "isend", peer=1), event("irecv", "irecv", peer=1),
           event("broadcast_object_list", "broadcast", nbytes=0)]
    carried = [op("all_gather", 24), op("send", 16, 1), op("recv", 16, 1),
               op("broadcast", 8), op("broadcast", 120)]
    verified, differs, _ = audit.verify(log, carried)
    assert differs is None
    assert [e["nbytes"] for e in verified] == [24, 16, 16, 128]


@pytest.mark.parametrize("log,carried,said", [
    ([event("all_reduce", "all_reduce")], [op("all_gather", 32), op("all_reduce")],
     "the relay carried all_gather of 32 bytes on the group of ranks [0, 1] (phase 'forward') "
     "that no torch.distributed call in the rank's log accounts for"),
    ([event("all_reduce", "all_reduce"), event("all_reduce", "all_reduce")], [op("all_reduce")],
     "the log says all_reduce was called (comm.py:31 in forward, phase 'forward'), and the "
     "relay saw nothing more from this rank"),
    ([event("isend", "isend", peer=1)], [op("send", 16, 0)],
     "the log says isend with rank 1 (comm.py:31 in forward), and the relay carried send to "
     "rank 0 of 16 bytes"),
    ([], [op("barrier", 0)], "that no torch.distributed call in the rank's log accounts for"),
])
def test_a_log_that_differs_from_the_account_is_named(log, carried, said):
    _, differs, phase = audit.verify(log, carried)
    assert differs is not None and said in differs and phase == "forward"


def test_the_relay_survives_ranks_that_die_together(relay):
    """Ending one rank fails what waits for it, which writes to ranks that may be gone too: the
    relay ends those as well, and goes on serving the living."""
    r, (a, b, c) = relay(3)
    group = {"g": "0,1,2#1", "m": [0, 1, 2]}
    for rank in (b, c):
        rank.post({"op": "all_reduce", "red": "SUM", **group}, [torch.zeros(2)])
    c.close()
    a.close()
    header, _ = b.reply()
    assert "ended before this operation completed" in header["error"]
    b.post({"op": "sync", "name": "done 0"})
    assert "ended" in b.reply()[0]["error"]
    assert r._thread.is_alive() and set(r.account.broken) == {0, 2}


def mark(rank, check, phase="setup"):
    rank.sock.sendall(b"".join(wire.encode({"op": "mark", "check": check, "phase": phase})))


def test_a_rank_names_its_checks_in_order_and_uses_each_harness_operation_once():
    """A rank's marks say which check its traffic is counted in: never back (its traffic
    could be moved into a check already judged), and the harness's synchronisation once a
    check (it carries no data: used again and again, its timing would)."""
    r = server.Relay(2, checks=3).start()
    try:
        a, b = (FakeRank(s, i) for i, s in enumerate(r.rank_ends()))
        mark(a, 1)
        mark(b, 1)
        a.post({"op": "flag"})
        a.post({"op": "flag"})
        b.post({"op": "sync", "name": "done 1"})
        assert "ended" in b.reply()[0]["error"] and "a second flag" in r.account.broken[0]
        mark(b, 0)
        b.sock.settimeout(2)
        assert b.sock.recv(1) == b""
        assert "a mark of check 0 after check 1" in r.account.broken[1]
    finally:
        r.stop(drain=0)


def test_settle_reads_what_a_rank_wrote_before_it(relay):
    r, (a, b) = relay(2)
    mark(a, 0)
    for _ in range(200):
        a.post({"op": "send", "peer": 1, **GROUP}, [torch.zeros(64)])
    assert r.settle()
    assert len(r.account.of(0, 0)) == 200


def test_a_log_claiming_torchs_ddp_is_not_taken_on_its_word():
    log = [event("DistributedDataParallel", "library", phase="init", nbytes=0)]
    _, differs, phase = audit.verify(log, [op("all_gather", 64)])
    assert "communicates in C++, where the log cannot follow it" in differs and phase == "init"


def test_a_peers_departure_is_fallout_not_the_cause():
    """A rank whose operation failed because a peer left is not the one the report blames:
    the peer's own error explains it (verdict.fallout, engine._diagnose)."""
    from rtp_course.checker.verdict import fallout
    r = server.Relay(2).start()
    try:
        assert fallout({"message": "RelayError: " + r._gone(1)})
        assert not fallout({"message": "RuntimeError: start (96) + length (32) exceeds dimension"})
    finally:
        r.stop(drain=0)
