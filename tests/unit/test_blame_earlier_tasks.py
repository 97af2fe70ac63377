"""diagnosis.blame_earlier_tasks: a failing check names a failed check of a task it requires
(closed over the course table's `requires`) or its plain check within its task as the likely
cause: never backwards, never an isolated check, never a check that was not graded, and the
root (the earliest in the course) when several fit. test_engine_budgets.py holds two more."""
from types import SimpleNamespace

from rtp_course.checker.diagnosis import blame_earlier_tasks
from rtp_course.checker.verdict import Result


def failed(exercise, check, task, status="failed", phase="forward"):
    return Result(exercise, check, 2, status, "max abs error", phase=phase, hint="own", task=task)


def blamed(r) -> str:
    """The check a result's hint names as its likely cause, or ''."""
    if not r.hint.startswith("this may follow from ["):
        return ""
    return r.hint.split("] ", 1)[1].split(",", 1)[0]


def test_a_failure_in_a_required_task_is_named_and_the_own_hint_kept_after_it():
    rs = [failed("rotation", "rotate", "E4.2"), failed("rotation", "ring_all_gather", "E4.3")]
    blame_earlier_tasks(rs)
    assert blamed(rs[1]) == "rotation.rotate"
    assert rs[1].hint.endswith("fix that first; if this check still fails after that: own")


def test_never_backwards():
    rs = [failed("rotation", "rotate", "E4.2"), failed("rotation", "ring_all_gather", "E4.3")]
    blame_earlier_tasks(rs)
    assert rs[0].hint == "own"


def test_the_requirements_are_closed_and_the_root_is_named():
    """ParallelMLP (E3.3) requires E3.1 and E3.2, which require comm's E2.1: comm's
    Duplication is the root."""
    rs = [failed("tensor_parallel", "ParallelMLP", "E3.3"),
          failed("tensor_parallel", "ColumnParallelLinear", "E3.1"),
          failed("comm", "Duplication", "E2.1")]
    blame_earlier_tasks(rs)
    assert blamed(rs[0]) == "comm.Duplication" and blamed(rs[1]) == "comm.Duplication"
    rs = [failed("tensor_parallel", "ParallelEmbedding", "E3.4"),       # requires E2.2 only
          failed("comm", "Duplication", "E2.1")]
    blame_earlier_tasks(rs)
    assert blamed(rs[0]) == ""


def test_a_check_not_graded_not_implemented_or_passed_is_never_named():
    for status in ("notimpl", "busy", "notrun", "passed"):
        rs = [failed("rotation", "rotate", "E4.2", status=status),
              failed("rotation", "ring_all_gather", "E4.3")]
        blame_earlier_tasks(rs)
        assert blamed(rs[1]) == "", status


def test_an_isolated_check_is_never_named_and_names_nothing():
    checks = {"rotation.rotate": SimpleNamespace(isolated=True),
              "rotation.ring_all_gather": SimpleNamespace(isolated=False)}
    rs = [failed("rotation", "rotate", "E4.2"), failed("rotation", "ring_all_gather", "E4.3")]
    blame_earlier_tasks(rs, checks)
    assert blamed(rs[1]) == ""
    checks = {"rotation.ring_all_gather": SimpleNamespace(isolated=True)}
    blame_earlier_tasks(rs, checks)
    assert blamed(rs[1]) == ""


def test_within_a_task_a_variant_names_its_plain_check_not_the_other_way():
    rs = [failed("tensor_parallel", "ColumnParallelLinear", "E3.1"),
          failed("tensor_parallel", "ColumnParallelLinear_gather_output", "E3.1")]
    blame_earlier_tasks(rs)
    assert blamed(rs[1]) == "tensor_parallel.ColumnParallelLinear" and blamed(rs[0]) == ""


def test_a_check_named_after_a_function_of_its_task_is_no_variant():
    """rotate_async is E4.2's own function, not a configuration of rotate."""
    rs = [failed("rotation", "rotate", "E4.2"), failed("rotation", "rotate_async", "E4.2")]
    blame_earlier_tasks(rs)
    assert blamed(rs[1]) == "" and blamed(rs[0]) == ""


def test_a_subgroup_check_names_a_plain_check_of_its_task():
    rs = [failed("rotation", "rotate", "E4.2"), failed("rotation", "rotate_subgroup", "E4.2"),
          failed("rotation", "subgroup", "E4.2")]
    blame_earlier_tasks(rs)
    assert blamed(rs[2]) == "rotation.rotate" and blamed(rs[0]) == ""


def test_a_result_without_a_task_is_left_alone():
    rs = [failed("rotation", "rotate", "E4.2"), failed("rotation", "ring_all_gather", "")]
    blame_earlier_tasks(rs)
    assert rs[1].hint == "own"
