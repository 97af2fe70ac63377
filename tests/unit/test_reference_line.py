"""The 'reference:' line of a failure shows only traffic that differs from the reference's in
count or bytes, not a different way of posting the same transfers (checker/reference.py)."""
from types import SimpleNamespace

from rtp_course.checker import reference


def _events(*kinds, nbytes=64, phase="M=6"):
    return [{"kind": k, "nbytes": nbytes, "phase": phase} for k in kinds]


def _annotated(mine, ref):
    result = SimpleNamespace(rank=0, phase="M=6", details={})
    reference.annotate(result, {0: SimpleNamespace(events=mine)}, {0: {"events": ref}})
    return result.details.get("vs_reference")


def test_blocking_sends_where_the_reference_batches_are_no_lead():
    assert _annotated(_events("send", "recv"), _events("isend", "irecv")) is None


def test_other_counts_or_bytes_are_shown():
    assert "send x2" in _annotated(_events("send", "send", "recv"), _events("isend", "irecv"))
    assert _annotated(_events("send", "recv", nbytes=32), _events("isend", "irecv"))
    assert _annotated(_events("all_reduce", "send"), _events("send"))
