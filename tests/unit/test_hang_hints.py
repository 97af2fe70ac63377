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


def test_a_crash_after_a_work_let_go_unwaited_names_that_work(tmp_path):
    """Issue 47: a prefetch's all-gather whose handle was overwritten wrote into the unit's
    freed buffer and the rank died of SIGSEGV; the report said "a tensor used after its memory
    was freed", never which work. The rank's status names the works it let go of."""
    import json
    import signal

    from rtp_course.checker import diagnosis
    from rtp_course.runtime.launcher import RankFailed

    class Check:
        id, exercise, name = "sharding.FullyShardedDataParallel", "sharding", "FullyShardedDataParallel"
    gone = "all_gather_into_tensor at sharding.py:116 in post_gather (phase forward)"
    for r in range(2):
        (tmp_path / f"status.{r}.json").write_text(json.dumps(
            {"check": Check.id, "phase": "forward", "call": None,
             "dropped": [gone, gone] if r == 1 else []}))
    res = diagnosis._crashed(dict(exercise="sharding", check="FullyShardedDataParallel",
                                  world_size=2), 2, tmp_path,
                             RankFailed(1, "", exit_code=-signal.SIGSEGV), Check(), {})
    assert f"it let go of a work it never waited: {gone}, 2 times" in res.message, res.message
    assert "never overwrite a handle still in flight" in res.hint, res.hint
