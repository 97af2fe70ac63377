"""What a hang's hint says of a transfer whose other half its peer posted but let go of
unwaited (checker/diagnosis.py), from the ranks' statuses alone."""
from rtp_course.checker import diagnosis
from rtp_course.checker.types import RankStatus


def hang_hint(check_id, statuses):
    """diagnosis.hang_hint of the statuses as the ranks write them (parsed as the watchdog does)."""
    return diagnosis.hang_hint(check_id, {r: RankStatus.parse(st) for r, st in statuses.items()})


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


# ---- what the ranks' statuses show of a hang ------------------------------------------------

from rtp_course.course.messages import say  # noqa: E402


def blocked(call="wait() on isend", family="isend", peer=1, **more):
    return {"check": C, "phase": "clockwise", "call": call, "family": family, "peer": peer,
            **more}


def test_ranks_blocked_outside_any_call_are_said_to_be_computing():
    outside = {"check": C, "phase": "clockwise", "call": None}
    assert hang_hint(C, {0: outside, 1: outside}) == say("hang.computing")
    assert hang_hint(C, {0: outside, 1: None}) == ""       # a rank unknown: nothing is sure


def test_every_rank_in_a_blocking_send_with_no_receive_posted_is_a_ring_of_sends():
    sends = {r: blocked("dist.send", "send", (r + 1) % 3, sent_to={str((r + 1) % 3): 1})
             for r in range(3)}
    assert hang_hint(C, sends) == say("hang.blocking-sends")
    sends[2]["recv_from"] = {"1": 1}
    assert hang_hint(C, sends) != say("hang.blocking-sends")


def test_ranks_that_finished_while_others_wait_in_a_collective_skipped_it():
    done = {"check": C, "phase": "done"}
    hint = hang_hint(C, {0: done, 1: blocked("all_reduce", "all_reduce", None)})
    assert hint.startswith("rank(s) 0 finished this check while the others wait in all_reduce")


def test_a_transfer_whose_peer_never_posted_its_half_names_the_direction():
    receiving = blocked("wait() on irecv", "irecv", 0, recv_from={"0": 1})
    elsewhere = blocked("wait() on isend", "isend", 2, sent_to={"2": 1})
    hint = hang_hint(C, {0: elsewhere, 1: receiving})
    assert hint.startswith("rank 1 waits to receive from rank 0, but rank 0 never posted a "
                           "send to rank 1 in this check (its sends went to rank(s) 2)"), hint
    assert hang_hint(C, {1: receiving, 0: dict(elsewhere, sent_to={"1": 1})}) == ""


def test_statuses_of_another_check_say_nothing_of_this_one():
    other = dict(blocked("dist.send", "send"), check="rotation.rotate_async")
    assert hang_hint(C, {0: other, 1: other}) == ""


def test_two_ranks_blocked_in_sends_to_each_other_are_named_as_such():
    """Each posted its receive after its send (1F1B's steady state, both sides unbatched):
    the peer has posted no receive YET, which is not that it never does."""
    hint = hang_hint(C, {0: blocked("wait() on isend", "isend", 1, sent_to={"1": 1}),
                         1: blocked("wait() on isend", "isend", 0, sent_to={"0": 1})})
    assert hint.startswith("rank 0 and rank 1 are both blocked in a send to each other"), hint


def test_a_peer_that_left_the_phase_with_a_send_missing_is_named():
    waiting = blocked("wait() on irecv", "irecv", 1, recv_from={"1": 6}, phase="M=6")
    went_on = blocked("wait() on isend", "isend", 2, sent_to={"0": 7}, phase="again M=6")
    hint = hang_hint(C, {0: waiting, 1: went_on})
    assert hint.startswith("rank 0 waits in phase 'M=6' to receive from rank 1, which went on "
                           "to phase 'again M=6'"), hint
    assert "finished this check" in hang_hint(C, {0: waiting, 1: dict(went_on, phase="done")})
