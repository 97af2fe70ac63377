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
                        "g": torch.eye(3).to_sparse(), "h": torch.tensor(2.5)},
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
    assert outcome["status"] == "error" and "not a result the checker wrote" in outcome["message"]
