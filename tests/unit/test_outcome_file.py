"""The outcome file between a checker rank and the parent: what goes in comes out, and a
file that lies about its records is refused, quickly and without running anything."""
import json
import os
import struct

import pytest
import torch

from rtp_course.checker import outcome_file
from rtp_course.checker.outcome_file import ALIGN, MAGIC

from rtp_course.checker.judging import judge, load_outcome  # the parent's side
from rtp_course.checker.types import Outcome, OutcomeStatus

HEAD = len(MAGIC) + 8


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


def _written(tmp_path, outcome=None, name="good.pt"):
    path = tmp_path / name
    path.write_bytes(outcome_file.dumps(_outcome() if outcome is None else outcome))
    return path


def _split(raw: bytes):
    """A file's header (as JSON data) and data region: what a forger starts from."""
    size, = struct.unpack_from("<Q", raw, len(MAGIC))
    start = -(-(HEAD + size) // ALIGN) * ALIGN
    return json.loads(raw[HEAD:HEAD + size]), raw[start:]


def _forge(header, data: bytes = b"", header_bytes: bytes = None) -> bytes:
    text = json.dumps(header).encode() if header_bytes is None else header_bytes
    start = -(-(HEAD + len(text)) // ALIGN) * ALIGN
    return (MAGIC + struct.pack("<Q", len(text)) + text).ljust(start, b"\0") + data


def _refused(tmp_path, raw: bytes, says: str = ""):
    path = tmp_path / "forged.pt"
    path.write_bytes(raw)
    with pytest.raises(ValueError) as e:
        outcome_file.load(path)
    assert says in str(e.value), str(e.value)
    back = load_outcome(path, 0)
    assert back.status == "error" and back.type == "MalformedResult"
    assert "not a result the checker can judge" in back.message
    return str(e.value)


# ------------------------------------------------------------------------- what goes in

def test_what_a_rank_writes_the_parent_reads(tmp_path):
    back, want = load_outcome(_written(tmp_path), 0), _outcome()
    assert back.status == "ok" and back.phase == "forward"
    assert back.values == want["values"] and type(back.values["slices"]) is tuple
    assert back.events == want["events"] and back.peak_recv == want["peak_recv"]
    assert list(back.records) == list(want["records"]) and back.records["b"] is None
    for key, t in want["records"].items():
        if t is not None:
            got = back.records[key]
            assert got.dtype == t.dtype and got.shape == t.shape, key
            assert torch.equal(got, t), key


@pytest.mark.parametrize("name", sorted(outcome_file.DTYPES))
def test_every_dtype_comes_back_as_it_went_in(tmp_path, name):
    dtype = outcome_file.DTYPES[name]
    full = torch.arange(-6, 18).to(torch.float64).view(2, 3, 4)
    if dtype.is_complex:
        full = torch.complex(full, -full)
    if name.startswith("uint"):
        full = full.abs()
    full = full.to(dtype)
    records = {"full": full, "0-d": full.reshape(-1)[7].clone(), "empty": full[:0],
               "empty 2": torch.empty(0, 5, dtype=dtype), "strided": full.transpose(0, 2)[::2],
               "none": None}
    if dtype.is_complex:
        records["conj"] = full.conj()
    if dtype.is_signed and not dtype.is_floating_point or dtype in (torch.float32, torch.float64):
        records["neg"] = torch._neg_view(full)
    back = outcome_file.load(_written(tmp_path, {"status": "ok", "records": records}))
    assert list(back["records"]) == list(records) and back["records"]["none"] is None
    for key, t in records.items():
        if t is not None:
            got = back["records"][key]
            assert got.dtype == dtype and got.shape == t.shape and not got.is_conj(), key
            assert torch.equal(got.reshape(-1).view(torch.uint8),       # bits: NaN, float8
                               t.resolve_conj().resolve_neg().reshape(-1).view(torch.uint8)), key
            assert got.data_ptr() % 16 == 0 or got.numel() == 0, key


def test_values_come_back_as_data_of_the_same_kinds(tmp_path):
    values = {"tuple": (1, (2.5, None), [True, "x"]), "int keys": {0: "a", 1: (2, 3)},
              "\0nul": {"\0t": 1, "\0\0": 2, "plain": float("inf")},
              "tensor": torch.arange(4.0).view(2, 2), "big": 2 ** 80, "list": [[], {}, ()],
              "not a number": float("nan")}
    back = outcome_file.load(_written(tmp_path, {"status": "ok", "values": values}))["values"]
    assert list(back) == list(values)
    for key in ("tuple", "int keys", "\0nul", "big", "list"):
        assert back[key] == values[key] and type(back[key]) is type(values[key]), key
    assert type(back["tuple"][1]) is tuple and back["list"][2] == ()
    assert torch.equal(back["tensor"], values["tensor"]) and back["not a number"] != 0


def test_fields_the_worker_adds_come_back(tmp_path):
    outcome = {"status": "error", "type": "ValueError", "message": "bad", "where": "x.py:1",
               "phase": "import", "hint": "fix it", "records": {}, "values": {}, "events": [],
               "peak_recv": {}, "extra": [1, 2]}
    back = outcome_file.load(_written(tmp_path, outcome))
    assert back == outcome


def test_a_long_message_is_cut_when_written_and_when_read(tmp_path):
    limit = outcome_file.TEXT_LIMIT
    big = "x" * (14 << 20)
    back = outcome_file.load(_written(tmp_path, {"status": "error", "message": big,
                                                 "where": "w" * (limit + 50), "hint": "short"}))
    assert back["message"] == "x" * limit + f"... (cut: {len(big) - limit} characters)"
    assert back["where"].endswith("... (cut: 50 characters)") and back["hint"] == "short"
    # a forged file that did not cut them (within the header's bound) is cut on reading
    header, data = _split(_written(tmp_path).read_bytes())
    header["outcome"]["message"] = "y" * (5 << 20)
    header["events"][0]["where"] = "z" * (1 << 20)
    header["outcome"]["values"]["long"] = "v" * (1 << 20)
    path = tmp_path / "forged.pt"
    path.write_bytes(_forge(header, data))
    back = outcome_file.load(path)
    assert len(back["message"]) < limit + 100 and back["message"].endswith(" characters)")
    assert len(back["events"][0]["where"]) < outcome_file.EVENT_TEXT_LIMIT + 100
    assert len(back["values"]["long"]) < limit + 100


def test_events_are_written_flat(tmp_path):
    events = [{"kind": "send", "peer": (1, 2), "nbytes": 2 ** 20000, "where": object()}, "odd"]
    back = outcome_file.load(_written(tmp_path, {"status": "ok", "events": events}))["events"]
    assert back[0]["kind"] == "send" and back[0]["peer"] == "(1, 2)"
    assert back[0]["nbytes"] == "an integer of 20001 bits" and back[1] == {"event": "'odd'"}


# ------------------------------------------------------------------ what cannot be compared

@pytest.mark.parametrize("record, says", [
    (lambda: torch.eye(3).to_sparse(), "is a torch.sparse_coo tensor, not a dense one"),
    (lambda: torch.eye(3).to_sparse_csr(), "is a torch.sparse_csr tensor, not a dense one"),
    (lambda: torch.empty(3, device="meta"), "is on meta"),
    (lambda: torch.ones(2, dtype=torch.complex32), "has dtype torch.complex32"),
])
@pytest.mark.filterwarnings("ignore::UserWarning")     # sparse CSR, complex32: "experimental"
def test_a_record_the_verdict_cannot_compare_fails_in_one_sentence(tmp_path, record, says):
    """A hostile or unlucky result (sparse, not on the CPU) is a failed check that says which
    record, never an exception in the parent's comparison."""
    outcome = _outcome()
    outcome["records"]["g"] = record()
    back = load_outcome(_written(tmp_path, outcome), 0)
    assert back.status == "error" and back.type == "MalformedResult"
    assert f"g {says}" in back.message and "\n" not in back.message, back.message


class _Liar:
    @property
    def __class__(self):
        return int


@pytest.mark.parametrize("field, value, says", [
    ("values", {"x": object.__new__(torch.nn.Identity)}, "values['x'] is a Identity"),
    ("values", {"x": [1, {"y": torch.eye(2).to_sparse()}]},
     "values['x'][1]['y'] is a torch.sparse_coo tensor"),
    ("values", {"x": _Liar()}, "values['x'] could not be written"),
    ("values", {"x": {1j: 2}}, "has a key of type complex"),
    ("message", ["a", "list"], "its message is not text"),
    ("peak_recv", {(1, 2): 3}, "has a key of type tuple"),
])
def test_fields_that_are_not_plain_data_are_refused(tmp_path, field, value, says):
    outcome = _outcome()
    outcome[field] = value
    back = load_outcome(_written(tmp_path, outcome), 0)
    assert back.status == "error" and back.type == "MalformedResult", back
    assert says in back.message, back.message


def test_values_that_nest_without_end_are_refused(tmp_path):
    loop = []
    loop.append(loop)
    _refused(tmp_path, outcome_file.dumps({"status": "ok", "values": {"x": loop}}),
             "values['x']" + "[0]" * (outcome_file.MAX_VALUE_DEPTH - 1) + " is nested too deeply")
    many = {"x": list(range(outcome_file.MAX_VALUE_ITEMS + 1))}
    _refused(tmp_path, outcome_file.dumps({"status": "ok", "values": many}),
             f"values['x'][{outcome_file.MAX_VALUE_ITEMS - 3}] makes the values too big")
    header = {"outcome": {"status": "ok", "values": many}, "records": [], "tensors": [],
              "events": [], "data": 0}
    _refused(tmp_path, _forge(header), f"its values hold over {outcome_file.MAX_VALUE_ITEMS}")


# ----------------------------------------------------------------------- forged files

def _first_record(field, value):
    def lie(header, data):
        header["records"][0][field] = value
        return _forge(header, data)
    return lie


def _set(part, value):
    def lie(header, data):
        header[part] = value
        return _forge(header, data)
    return lie


@pytest.mark.parametrize("lie, says", [
    (_first_record(3, 10_000), "outside the data"),              # past the end of the data
    (_first_record(3, -ALIGN), "outside the data"),
    (_first_record(3, 8), "outside the data"),                   # not aligned
    (_first_record(3, 1.5), "outside the data"),
    (_first_record(2, [2, -3]), "no shape"),                     # a negative dimension
    (_first_record(2, [0, 1 << 62, 1 << 62]), "no shape"),
    (_first_record(2, [1] * 65), "no shape"),
    (_first_record(2, "2x3"), "no shape"),
    (_first_record(1, "complex256"), "unknown dtype"),
    (_first_record(1, "object"), "unknown dtype"),
    (_first_record(0, 7), "not [key, ...]"),
    (lambda h, d: _forge(h, d[:-ALIGN]), "not as long as its header says"),
    (lambda h, d: _forge(h, d + b"\0" * ALIGN), "not as long as its header says"),
    (_set("records", "[[\"a\"]]"), "lacks a part"),               # not a list
    (_set("events", "{not json"), "lacks a part"),
    (_set("events", [{"kind": ["a"]}]), "more than plain numbers and text"),
    (_set("events", [[1, 2]]), "not a list of records"),
    (_set("data", None), "lacks a part"),
    (lambda h, d: _forge([h], d), "not an object"),
    (lambda h, d: _forge(h, d, header_bytes=b"{\"outcome\": {"), "not JSON"),
    (lambda h, d: _forge(h, d, header_bytes=b"\xff\xfe{}"), "not JSON"),
    (lambda h, d: _forge({**h, "records": h["records"] + h["records"][:1]}, d), "listed twice"),
    (lambda h, d: _forge({**h, "outcome": {**h["outcome"], "message": 3}}, d),
     "its message is not text"),
    (lambda h, d: _forge({**h, "outcome": {**h["outcome"], "values": {"\0x": 1}}}, d),
     "unknown tag"),
    (lambda h, d: _forge({**h, "outcome": {**h["outcome"], "values": {"t": {"\0T": 5}}}}, d),
     "unknown tag"),
    (lambda h, d: _forge({**h, "outcome": {**h["outcome"], "values": {"t": [[[[[[[[[[[[[[
        [[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]}}}, d), "nested too deeply"),
    (lambda h, d: _forge({**h, "records": [["k", None, [[[[["x"]]]]]]]}, d),
     "k is something the checker cannot read"),
])
def test_a_file_that_lies_about_its_records_is_not_a_result(tmp_path, lie, says):
    header, data = _split(_written(tmp_path).read_bytes())
    _refused(tmp_path, lie(header, data), says)


def test_files_that_are_no_outcome_at_all_are_refused(tmp_path):
    good = _written(tmp_path).read_bytes()
    _refused(tmp_path, os.urandom(4096), "not an outcome file")
    (tmp_path / "empty.pt").write_bytes(b"")
    with pytest.raises(ValueError, match="not an outcome file"):
        outcome_file.load(tmp_path / "empty.pt")
    buf = tmp_path / "pickle.pt"
    torch.save({"format": 2, "status": "ok"}, buf)
    _refused(tmp_path, buf.read_bytes(), "not an outcome file")
    for end in (5, HEAD - 1, HEAD + 10, len(good) - 1):
        _refused(tmp_path, good[:end])
    _refused(tmp_path, MAGIC + struct.pack("<Q", 1000) + b"{}", "past the end of the file")
    _refused(tmp_path, MAGIC + struct.pack("<Q", 2 ** 64 - 1) + b"{}", "header is over")


def test_a_million_nested_brackets_are_refused_not_a_recursion_error(tmp_path):
    for text in (b"[" * 1_000_000, b"[" * 1_000_000 + b"]" * 1_000_000, b'{"a":' * 500_000):
        _refused(tmp_path, _forge(None, header_bytes=text), f"over {outcome_file.MAX_BRACKETS} lists and objects")
    for text in (b"[" * 150_000, b"[" * 150_000 + b"]" * 150_000, b'{"a":' * 150_000):
        _refused(tmp_path, _forge(None, header_bytes=text), "nested too deeply")


def test_a_header_of_many_small_lists_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    monkeypatch.setattr(outcome_file, "_loads", lambda *a: pytest.fail("parsed"))
    text = b'{"a":[' + b",".join([b"[]"] * outcome_file.MAX_BRACKETS) + b"]}"
    _refused(tmp_path, _forge(None, header_bytes=text), "lists and objects")


def test_a_header_over_its_bound_is_refused_before_it_is_parsed(tmp_path, monkeypatch):
    monkeypatch.setattr(outcome_file, "_loads", lambda *a: pytest.fail("parsed"))
    raw = _forge(None, header_bytes=b" " * (outcome_file.MAX_HEADER + 1))
    _refused(tmp_path, raw, f"header is over {outcome_file.MAX_HEADER >> 20} MB")


def test_an_oversized_result_is_refused_before_it_is_read(tmp_path, monkeypatch):
    path = tmp_path / "sparse.pt"
    with open(path, "wb") as f:
        f.write(_written(tmp_path).read_bytes())
        f.truncate(300 << 20)                 # sparse: no disk, but 300 MB to read
    monkeypatch.setattr(outcome_file, "bytearray", lambda n: pytest.fail("read"), raising=False)
    with pytest.raises(ValueError, match="over 256 MB"):
        outcome_file.load(path)
    monkeypatch.delattr(outcome_file, "bytearray")
    monkeypatch.setattr(outcome_file, "MAX_BYTES", 100)
    back = load_outcome(_written(tmp_path), 0)
    assert back.type == "MalformedResult" and "over 0 MB" in back.message


def test_what_is_not_a_regular_file_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "fifo.pt"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="not a regular file"):
        outcome_file.load(fifo)
    link = tmp_path / "link.pt"
    link.symlink_to(_written(tmp_path))
    with pytest.raises(ValueError, match="cannot be opened"):
        outcome_file.load(link)


def test_a_million_tiny_records_are_refused_by_a_bound(tmp_path):
    # as a rank would write them: the header alone is over its bound
    records = {str(i): None for i in range(1_000_000)}
    _refused(tmp_path, outcome_file.dumps({"status": "ok", "records": records}),
             "header is over")
    # forged to fit in the header: the count is refused before any record is made
    n = outcome_file.MAX_RECORDS + 1
    text = b'{"outcome":{"status":"ok"},"tensors":[],"events":[],"data":64,"records":[' \
        + b",".join(b'["%x"]' % i for i in range(n)) + b"]}"
    assert len(text) <= outcome_file.MAX_HEADER
    _refused(tmp_path, _forge(None, b"\0" * 64, header_bytes=text),
             f"over {outcome_file.MAX_RECORDS} records")
    # at the bound, they load: views of the one buffer
    records = {str(i): torch.tensor(i % 256, dtype=torch.uint8)
               for i in range(outcome_file.MAX_RECORDS)}
    back = outcome_file.load(_written(tmp_path, {"status": "ok", "records": records}))
    assert len(back["records"]) == outcome_file.MAX_RECORDS
    assert back["records"]["300"].item() == 300 % 256


def test_too_many_events_are_refused(tmp_path):
    n = outcome_file.MAX_EVENTS + 1
    text = b'{"outcome":{"status":"ok"},"tensors":[],"records":[],"data":0,"events":[' \
        + b",".join([b"{}"] * n) + b"]}"
    _refused(tmp_path, _forge(None, header_bytes=text), f"over {outcome_file.MAX_EVENTS} events")


# ------------------------------------------------------------------- read_json_bounded

def test_read_json_bounded(tmp_path):
    path = tmp_path / "status.0.json"
    read = outcome_file.read_json_bounded
    status = {"check": "comm.Duplication", "phase": "forward", "sent_to": {"1": 2}}
    path.write_text(json.dumps(status) + " " * 40)      # padded over a longer earlier text
    assert read(path) == status
    path.write_text(json.dumps(status)[:20])             # half written
    assert read(path) is None
    path.write_bytes(b"[" * 1_000_000)                   # a million deep: RecursionError inside
    assert read(path) is None and read(path, max_bytes=2_000_000) is None
    path.write_bytes(b"[" * 900 + b"]" * 900)            # parses, but too deep to repr
    assert read(path) is None
    path.write_bytes(b"[" * 10 + b"]" * 10)
    assert read(path) == [[[[[[[[[[]]]]]]]]]]
    path.write_text(json.dumps({"check": "[" * 5000}))   # brackets in a string are text
    assert read(path) == {"check": "[" * 5000}
    path.write_bytes(b'"' + b"x" * 65536 + b'"')          # over the bound: not read at all
    assert read(path) is None and read(path, max_bytes=70000) == "x" * 65536
    with open(path, "wb") as f:
        f.truncate(1 << 34)                              # sparse, 16 GB
    assert read(path) is None
    path.write_bytes(b"\xff\xfe\x00")
    assert read(path) is None
    assert read(tmp_path / "missing.json") is None
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert read(fifo) is None


# ------------------------------------------------------------------------------ verdict

def test_a_comparison_that_raises_is_a_failed_check_not_a_crash(monkeypatch):
    from rtp_course.checker import registry, verdict
    check = next(c for c in registry.load_checks(registry.check_modules(["comm"], False))
                 if c.name == "Duplication")
    monkeypatch.setattr(verdict, "compare", lambda *a: 1 / 0)
    result = judge(check, 2, {0: Outcome(OutcomeStatus.OK), 1: Outcome(OutcomeStatus.OK)})
    assert isinstance(result, verdict.Result) and result.status == "error"
    assert "could not compare what the ranks recorded (ZeroDivisionError)" in result.message
