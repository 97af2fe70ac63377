"""A checker may enforce only what a stub's "Rules" section states: every rule a rejection
quotes (rule 'Name') is named in the Rules of the exercise whose checks quote it."""
import re

import pytest

from rtp_course.runtime import gpu_placement
from rtp_course.course import EXERCISES
from wrongs import ROOT

QUOTED = re.compile(r"rule '([^']+)'")


def rules_section(exercise: str) -> str:
    text = (ROOT / "rtp_course" / f"{exercise}.py").read_text()
    doc = text.split('"""', 2)[1]
    assert "Rules" in doc, f"rtp_course/{exercise}.py: its docstring has no Rules section"
    return doc[doc.index("Rules"):]


def quoted_by(exercise: str) -> set:
    files = list((ROOT / "rtp_course" / "checker" / "public").glob(f"{exercise}*.py"))
    files += list((ROOT / "tests" / "hidden").glob(f"{exercise}.py"))
    names = {m for f in files for m in QUOTED.findall(f.read_text())}
    return names | set(QUOTED.findall(gpu_placement.RULE))   # every check runs under 'Device'


@pytest.mark.parametrize("exercise", EXERCISES)
def test_every_quoted_rule_is_stated_in_the_stub(exercise):
    rules = rules_section(exercise).lower()
    missing = [name for name in sorted(quoted_by(exercise)) if name.lower() not in rules]
    assert not missing, f"rtp_course/{exercise}.py states no rule named {missing}"


def test_the_device_rule_is_quoted():
    assert QUOTED.findall(gpu_placement.RULE) == ["Device"]


# The other direction: every rule a stub states is held by public checks. Each bullet of a
# Rules section (by its first words) names the public checks that enforce it; a bullet
# added without checks, or a check renamed away, fails here. The wrong implementations in
# tests/wrong/ show each check catching its bug.
HELD_BY = {
    "data_parallel": {
        "Results:": ["DataParallel", "DataParallel_buffers", "DataParallel_frozen_accumulated",
                     "average_gradients"],
        "Communication:": ["DataParallel", "average_gradients", "DataParallel_frozen_accumulated"],
        "Use `group` for": ["DataParallel_subgroups"],
        "Build it yourself,": ["DataParallel", "DataParallel_frozen_accumulated"],
        "Device:": ["DataParallel"],
    },
    "comm": {
        "Never modify the": ["Duplication", "AllReduce", "AllGather", "Split"],
        "Communication:": ["Duplication", "AllReduce", "AllGather", "Split"],
        "Pass `group=group` to": ["subgroups"],
        "A function with": ["Duplication", "AllReduce", "AllGather", "Split"],
        "Device:": ["AllGather"],
    },
    "tensor_parallel": {
        "from_serial(module) builds the": ["ColumnParallelLinear", "RowParallelLinear",
                                           "ParallelEmbedding_padding_idx"],
        "Replicated parameters (row-layer": ["RowParallelLinear", "ParallelMLP"],
        "A size that": ["sizes_not_divisible"],
        "Memory:": ["ParallelMLP"],
        "Communication:": ["ColumnParallelLinear", "RowParallelLinear", "ParallelMLP"],
        "Use `group` for": ["ParallelMLP_subgroup", "ParallelEmbedding_subgroup"],
        "Device:": ["ColumnParallelLinear"],
    },
    "rotation": {
        "Point-to-point only:": ["rotate", "ring_all_gather", "ring_reduce_scatter"],
        "Traffic:": ["rotate", "ring_all_gather", "ring_reduce_scatter"],
        "Post the receive": ["rotate"],
        "Wait on EVERY": ["rotate", "rotate_async", "wait_twice"],
        "r and N are": ["ring_peers", "subgroup"],
        "Never modify the": ["rotate", "ring_reduce_scatter"],
        "Receivers allocate the": ["rotate", "rotate_uneven"],
        "Nothing here is": ["rotate"],
        "Device:": ["rotate"],
    },
    "flyweight": {
        "Each rank's forward": ["FlyweightWrapper", "Linear", "Conv2d", "Embedding",
                                "MultiheadAttention",
                                "MultiheadAttention_batch_first", "TransformerLM"],
        "Rotation only (your": ["Linear", "TransformerLM"],
        "Traffic:": ["Linear", "TransformerLM"],
        "Overlap:": ["Linear", "Embedding"],
        "Memory:": ["TransformerLM", "MnistCNN"],
        "Use `group` for": ["Linear_subgroup"],
        "Device:": ["Linear"],
    },
    "groups": {
        "Layout:": ["build_groups"],
        "Results:": ["parallelize_2d", "train_2d_bert"],
        "Communication:": ["train_2d_bert"],
        "Device:": ["train_2d_bert"],
    },
}


@pytest.mark.parametrize("exercise", EXERCISES)
def test_every_stated_rule_is_held_by_public_checks(exercise):
    from rtp_course.checker.registry import check_modules, load_checks
    bullets = re.findall(r"^\* (.+)$", rules_section(exercise), re.M)
    public = {c.name for c in load_checks(check_modules([exercise], False))}
    held = HELD_BY[exercise]
    for bullet in bullets:
        keys = [k for k in held if bullet.startswith(k)]
        assert keys, f"rtp_course/{exercise}.py states a rule no public check is listed for: {bullet!r}"
        missing = [c for c in held[keys[0]] if c not in public]
        assert not missing, f"{exercise}: rule {keys[0]!r} lists checks that are not public: {missing}"
    stale = [k for k in held if not any(b.startswith(k) for b in bullets)]
    assert not stale, f"{exercise}: HELD_BY lists rules the stub no longer states: {stale}"
