"""What a hang's hint says of a transfer whose other half its peer posted but let go of
unwaited (checker/diagnosis.py), from the ranks' statuses alone."""
from rtp_course.checker.diagnosis import hang_hint

C = "rotation.rotate"


def _statuses(dropped: bool, call: str):
    receiver = {"check": C, "phase": "clockwise", "call": "wait() on irecv from rotation.py:63",
                "family": "irecv", "peer": 0, "sent_to": {"2": 1}, "recv_from": {"0": 1},
                "unwaited_to": {}, "dropped_to": {}}
    sender = {"check": C, "phase": "clockwise", "call": call, "family": "irecv", "peer": 2,
              "sent_to": {"1": 1}, "recv_from": {"2": 1}, "unwaited_to": {"1": 1},
              "dropped_to": {"1": 1} if dropped else {}}
    return {0: sender, 1: receiver}


def test_a_peer_that_let_go_of_its_send_is_named():
    assert "never waited on its work" in hang_hint(C, _statuses(True, "wait() on irecv from rotation.py:61"))


def test_a_peer_that_still_holds_its_sends_work_is_not_said_to_have_dropped_it():
    """Blocked in the wait() of the batch that holds the send, or in a receive it waits on
    before the send's own wait: the send is not waited yet, not let go."""
    for call in ("wait() on batch_isend_irecv from rotation.py:60", "wait() on irecv from rotation.py:61"):
        assert "never waited on its work" not in hang_hint(C, _statuses(False, call))
