"""Ranks whose collectives do not match are named with both calls (checker/communication.py),
from their records and from the call each was in when the group ended; correct programs whose
ranks legitimately give different tensors are never named."""
from rtp_course.checker.communication import collectives_differ
from rtp_course.checker.types import Outcome, RankStatus

WHERE = "data_parallel.py:12 in average_gradients"


def _event(nth, given, kind="all_reduce", family=None, group="1", phase="backward"):
    return {"kind": kind, "family": family or kind, "group": group, "nth": nth, "given": given,
            "where": WHERE, "phase": phase}


def _outcome(*events):
    return Outcome.parse({"status": "error", "events": list(events)})


def test_a_skipped_call_is_named_with_both_ranks_calls():
    outcomes = {0: _outcome(_event(1, "[12, 8] float32"), _event(2, "[6, 12] float32")),
                1: _outcome(_event(1, "[12, 8] float32"), _event(2, "[12] float32"))}
    found = collectives_differ(outcomes)
    assert found["rank"] == 1 and found["phase"] == "backward"
    assert ("rank 0's 2nd collective on the group is all_reduce at data_parallel.py:12 in "
            "average_gradients, given [6, 12] float32; rank 1's 2nd is all_reduce at "
            "data_parallel.py:12 in average_gradients, given [12] float32") in found["message"]
    assert "same order" in found["hint"]


def test_a_rank_that_died_in_its_call_is_read_from_its_status():
    outcomes = {0: _outcome(_event(1, "[4] float64"), _event(2, "[4] float64"))}
    statuses = {1: RankStatus.parse({
        "phase": "backward", "family": "irecv",       # a later call, ended
        "last_collective": {"kind": "broadcast", "family": "broadcast", "group": "1", "nth": 2,
                            "given": "[4] float64", "where": WHERE, "phase": "backward"}})}
    found = collectives_differ(outcomes, statuses)
    assert "rank 1's 2nd is broadcast" in found["message"], found


def test_another_dtype_is_a_mismatch_whatever_the_operation():
    outcomes = {0: _outcome(_event(1, "[8] float32", kind="all_to_all_single", family="all_to_all")),
                1: _outcome(_event(1, "[8] bfloat16", kind="all_to_all_single", family="all_to_all"))}
    assert "given [8] bfloat16" in collectives_differ(outcomes)["message"]


def test_what_correct_programs_do_is_never_named():
    uneven = {0: _outcome(_event(1, "[3, 4] float32", kind="all_gather", family="all_gather"),
                          _event(2, "[5] float32", kind="all_to_all_single", family="all_to_all")),
              1: _outcome(_event(1, "[2, 4] float32", kind="all_gather", family="all_gather"),
                          _event(2, "[9] float32", kind="all_to_all_single", family="all_to_all"))}
    assert collectives_differ(uneven) is None          # uneven shards, uneven splits
    same_count = {0: _outcome(_event(1, "[12, 8] float32")), 1: _outcome(_event(1, "[96] float32"))}
    assert collectives_differ(same_count) is None      # NCCL counts elements
    other_groups = {0: _outcome(_event(1, "[4] float32", group="2")),
                    1: _outcome(_event(1, "[7] float32", group="3"))}
    assert collectives_differ(other_groups) is None    # two subgroups, each its own sequence
    fewer = {0: _outcome(_event(1, "[4] float32")), 1: _outcome()}
    assert collectives_differ(fewer) is None           # a missing call is a hang: said there
    funcol = {0: _outcome(_event(1, "[4] float32", kind="funcol.all_reduce", family="all_reduce")),
              1: _outcome(_event(1, "[4] float32"))}
    assert collectives_differ(funcol) is None          # two APIs, one operation
    mesh = {0: _outcome(_event(1, "[4, 8] float32", group="?")),
            1: _outcome(_event(1, "[3, 8] float32", group="?"))}
    assert collectives_differ(mesh) is None            # a group it could not name: not compared


def _a2a(splits, members="(0, 1, 2)"):
    return {"kind": "all_to_all_single", "family": "all_to_all", "group": "1", "nth": 2,
            "given": "[5, 6] float64", "where": "experts.py:23 in forward", "phase": "forward",
            "splits": splits, "members": members}


def test_all_to_all_splits_that_do_not_pair_up_are_named_with_both_numbers():
    """Splits not exchanged (E10 finding M04): whichever rank the transport failed first, the
    report pairs rank p's input_splits[q] with rank q's output_splits[p]."""
    outcomes = {0: _outcome(_a2a("in [1, 2, 2] out [1, 2, 2]")),
                2: _outcome(_a2a("in [3, 0, 1] out [3, 0, 1]"))}
    statuses = {1: RankStatus.parse({"phase": "forward",
                                     "last_collective": _a2a("in [2, 2, 0] out [2, 2, 0]")})}
    found = collectives_differ(outcomes, statuses)
    assert found["rank"] == 0 and found["phase"] == "forward", found
    assert ("rank 1 sends 2 rows to rank 0 (rank 1's input_splits[0]: [2, 2, 0]), but rank 0 "
            "expects 2 from rank 1") not in found["message"]
    assert ("rank 2 sends 3 rows to rank 0 (rank 2's input_splits[0]: [3, 0, 1]), but rank 0 "
            "expects 2 from rank 2 (rank 0's output_splits[2]: [1, 2, 2])") in found["message"]
    assert "exchange the split sizes first" in found["hint"]


def test_all_to_all_splits_that_pair_up_are_not_named():
    outcomes = {0: _outcome(_a2a("in [1, 2] out [1, 4]", "(0, 1)")),
                1: _outcome(_a2a("in [4, 0] out [2, 0]", "(0, 1)"))}
    assert collectives_differ(outcomes) is None
