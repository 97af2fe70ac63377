"""checker/communication.py's rules on a rank's recorded calls, from made-up events: the counts,
bytes and peers of CommRules (`check_comm`), the group a call ran on (`wrong_group`), and a
send buffer written before its wait (`written_send`)."""
from rtp_course.checker.communication import check_comm, written_send, wrong_group
from rtp_course.checker.registry import Bound, CommRule


def call(kind, phase="forward", family=None, nbytes=64, peer=None, where="comm.py:9", **more):
    return {"kind": kind, "family": family or kind, "phase": phase, "nbytes": nbytes,
            "peer": peer, "where": where, **more}


def test_an_exact_count_fails_above_and_below_and_names_what_was_seen():
    rule = CommRule("forward", "all_reduce", 1)
    assert check_comm([rule], [call("all_reduce")]) is None
    broken, msg = check_comm([rule], [call("all_reduce"), call("all_reduce", where="comm.py:12")])
    assert broken is rule
    assert msg == ("forward: 2 all_reduce call(s), expected exactly 1; seen: all_reduce at "
                   "comm.py:9, all_reduce at comm.py:12")
    assert check_comm([rule], [])[1].endswith("expected exactly 1; seen: none")


def test_a_bound_count_takes_any_number_in_its_range():
    rule = CommRule("forward", "p2p", Bound(1, 2))
    assert check_comm([rule], [call("isend")]) is None
    assert check_comm([rule], [call("isend"), call("irecv")]) is None
    assert "expected between 1 and 2" in check_comm([rule], [call("send")] * 3)[1]


def test_only_calls_of_the_rules_phase_count_and_every_phase_names_where_it_broke():
    assert check_comm([CommRule("forward", "all_reduce", 1)],
                      [call("all_reduce"), call("all_reduce", phase="backward")]) is None
    broken, msg = check_comm([CommRule("*", "all_reduce", 1)],
                             [call("all_reduce", phase="backward"), call("all_reduce")])
    assert broken.phase == "backward" and msg.startswith("backward: 2 all_reduce"), msg


def test_a_kind_counts_every_api_of_its_operation():
    """"all_gather" counts all_gather_into_tensor (its family) too; "a|b" either; "collective"
    what is not point-to-point, "p2p" what is; "*" every call."""
    events = [call("all_gather_into_tensor", family="all_gather"), call("broadcast"),
              call("isend", peer=1), call("recv", peer=1)]
    for kind, n in (("all_gather", 1), ("broadcast|all_gather", 2), ("collective", 2),
                    ("p2p", 2), ("*", 4), ("all_reduce", 0)):
        assert check_comm([CommRule("forward", kind, n)], events) is None, kind
        assert check_comm([CommRule("forward", kind, n + 1)], events) is not None, kind
    assert "4 communicating call(s)" in check_comm([CommRule("forward", "*", 1)], events)[1]


def test_the_bytes_of_a_rules_calls_are_added_up():
    events = [call("all_gather", nbytes=96), call("all_gather", nbytes=32)]
    assert check_comm([CommRule("forward", "all_gather", 2, nbytes=128)], events) is None
    assert check_comm([CommRule("forward", "all_gather", 2, nbytes=Bound(high=200))], events) is None
    _, msg = check_comm([CommRule("forward", "all_gather", 2, nbytes=96)], events)
    assert msg == "forward: all_gather call(s) moved 128 bytes on this rank, expected 96"


def test_a_call_to_a_rank_outside_the_peers_is_named():
    rule = CommRule("forward", "p2p", 2, peers=(1,))
    assert check_comm([rule], [call("isend", peer=1), call("irecv", peer=1)]) is None
    _, msg = check_comm([rule], [call("isend", peer=1), call("irecv", peer=3)])
    assert msg == ("forward: p2p with the wrong rank(s): irecv with rank 3 at comm.py:9; "
                   "expected only rank(s) 1")


def test_the_first_rule_broken_is_the_one_named():
    first, second = CommRule("forward", "all_reduce", 0), CommRule("forward", "broadcast", 0)
    assert check_comm([first, second], [call("broadcast"), call("all_reduce")])[0] is first


def test_a_call_on_another_group_than_its_rules_members_is_named():
    rule = CommRule("forward", "all_reduce", 1, members=(2, 0))
    assert wrong_group([rule], [call("all_reduce", members="(0, 2)")]) is None
    assert wrong_group([rule], [call("all_reduce")]) is None            # group unknown
    assert wrong_group([CommRule("forward", "all_reduce", 1)],
                       [call("all_reduce", members=(0, 1))]) is None    # no members: any group
    broken, msg = wrong_group([rule], [call("all_reduce", members=[1, 0, 3])])
    assert broken is rule and msg == ("forward: all_reduce at comm.py:9 ran on ranks [0, 1, 3]; "
                                      "this call belongs to the group of ranks [0, 2]")


def test_a_send_buffer_written_before_its_wait_is_named():
    assert written_send([call("isend", peer=1)]) is None
    said = written_send([call("isend", peer=1), call("isend", peer=2, overwritten=True)])
    assert said == ("forward: the buffer of the isend to rank 2 at comm.py:9 was written to "
                    "before its work was waited")
