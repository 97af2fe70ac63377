"""The outcome file between a checker rank and the parent: what goes in comes out, and a
file that lies about its records is refused without running anything."""
import json

import pytest
import torch

from rtp_course.checker import engine, outcome_file


def _outcome():
    return {"status": "ok", "phase": "forward",
            "records": {"a": torch.arange(6.0, dtype=torch.float64).view(2, 3),
                        "b": None, "c": torch.tensor(True), "d": torch.ones(0, 4),
                        "e": torch.arange(5)[::2], "f": torch.arange(6.0).view(3, 2).t(),
                        "h": torch.tensor(2.5)},
            "values": {"overlap": True, "slices": (0, ((4, 7),)), "bytes": 288},
            "events": [{"kind": "isend", "phase": "forward", "nbytes": 96, "peer": 1,
                        "where": "flyweight.py:88 in forward", "family": "isend",
                        "completed": False}],
            "peak_recv": {"forward": 288}}


def test_what_a_rank_writes_the_parent_reads(tmp_path):
    path = tmp_path / "result.x.0.pt"
    path.write_bytes(outcome_file.dumps(_outcome()))
    back, want = engine._load_outcome(path, 0), _outcome()
    assert back["status"] == "ok" and back["values"] == want["values"]
    assert back["events"] == want["events"] and back["peak_recv"] == want["peak_recv"]
    assert back["records"].keys() == want["records"].keys() and back["records"]["b"] is None
    for key, t in want["records"].items():
        if t is not None:
            got = back["records"][key]
            assert got.dtype == t.dtype and got.shape == t.shape, key
            assert torch.equal(got.to_dense(), t.to_dense()), key


def _first_record(field, value):
    def lie(raw):
        index = json.loads(raw["records"])
        index[0][field] = value
        raw["records"] = json.dumps(index)
    return lie


@pytest.mark.parametrize("lie", [
    _first_record(3, 10_000),                                    # past the end of its blob
    _first_record(3, -1),
    _first_record(1, "complex128"),                              # no such blob
    lambda raw: raw.__setitem__("events", "{not json"),
    lambda raw: raw.__setitem__("records", [["a"]]),             # not the JSON text
    lambda raw: raw.__setitem__("format", 1),
])
def test_a_file_that_lies_about_its_records_is_not_a_result(tmp_path, lie):
    path = tmp_path / "result.x.0.pt"
    path.write_bytes(outcome_file.dumps(_outcome()))
    raw = torch.load(path, weights_only=True)
    lie(raw)
    torch.save(raw, path)
    outcome = engine._load_outcome(path, 0)
    assert outcome["status"] == "error" and "not a result the checker can judge" in outcome["message"]


@pytest.mark.parametrize("record, says", [
    (torch.eye(3).to_sparse(), "is a torch.sparse_coo tensor, not a dense one"),
    (torch.eye(3).to_sparse_csr(), "is a torch.sparse_csr tensor, not a dense one"),
    (torch.empty(3, device="meta"), "is on meta"),
])
def test_a_record_the_verdict_cannot_compare_fails_in_one_sentence(tmp_path, record, says):
    """A hostile or unlucky result (sparse, not on the CPU) is a failed check that says which
    record, never an exception in the parent's comparison."""
    path = tmp_path / "result.x.0.pt"
    raw = torch.load(_written(tmp_path), weights_only=True)     # as a hostile rank writes it
    raw["other"]["g"] = record
    raw["records"] = json.dumps(json.loads(raw["records"]) + [["g", "other"]])
    torch.save(raw, path)
    back = engine._load_outcome(path, 0)
    assert back["status"] == "error" and back["type"] == "MalformedResult"
    assert f"g {says}" in back["message"] and "\n" not in back["message"], back["message"]


@pytest.mark.parametrize("field, value, says", [
    ("values", {"x": object.__new__(torch.nn.Identity)}, "values['x'] is a Identity"),
    ("values", {"x": torch.eye(2).to_sparse()}, "is a torch.sparse_coo tensor"),
    ("message", ["a", "list"], "its message is not text"),
    ("peak_recv", {(1, 2): 3}, "has a key of type tuple"),
])
def test_fields_that_are_not_plain_data_are_refused(tmp_path, field, value, says):
    path = tmp_path / "result.x.0.pt"
    raw = torch.load(_written(tmp_path), weights_only=True)
    raw[field] = value
    torch.save(raw, path)
    back = engine._load_outcome(path, 0)
    if back["status"] == "error" and back["type"] == "MalformedResult":
        assert says in back["message"] or "UnpicklingError" in back["message"], back["message"]
    else:
        pytest.fail(f"accepted {value!r}")


def test_an_oversized_result_is_refused_before_it_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(outcome_file, "MAX_BYTES", 1000)
    back = engine._load_outcome(_written(tmp_path), 0)
    assert back["type"] == "MalformedResult" and "over 0 MB" in back["message"]


def _written(tmp_path):
    path = tmp_path / "good.pt"
    path.write_bytes(outcome_file.dumps(_outcome()))
    return path


def test_a_comparison_that_raises_is_a_failed_check_not_a_crash(monkeypatch):
    from rtp_course.checker import registry, verdict
    check = next(c for c in registry.load_checks(engine.check_modules(["comm"], False))
                 if c.name == "Duplication")
    monkeypatch.setattr(engine, "judge", lambda *a: 1 / 0)
    result = engine._judge(check, 2, {0: {}, 1: {}})
    assert isinstance(result, verdict.Result) and result.status == "error"
    assert "could not compare what the ranks recorded (ZeroDivisionError)" in result.message
