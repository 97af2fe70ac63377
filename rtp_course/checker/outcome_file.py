"""A rank's outcome of one check as a file: written by the worker, read by the parent.

The file is written by a process that ran the code under test, so the parent reads it as
data it distrusts: nothing is unpickled (an unpickler pays per object, in pure Python, and
a result padded with 8 million small objects kept the parent in it past every time
budget), every count and size is checked before it is spent, and every error is a
ValueError with a short reason (the parent's loader turns it into a MalformedResult).

Format (FORMAT = 3), byte for byte:

    MAGIC                    b"rtp-course outcome 3\\n"
    header length H          8 bytes, unsigned little-endian; H <= MAX_HEADER
    header                   H bytes of JSON (ASCII: json.dumps' escapes), one object
    padding                  zero bytes, up to the next multiple of ALIGN from the file start
    data                     the raw bytes of every tensor, to the end of the file

The header object:

    "outcome":  {key: value}  every field of the outcome but "records" and "events"
                              ("status", "type", "message", "where", "phase", "hint",
                              "values", "peak_recv", ...), as encoded values (below)
    "records":  [entry, ...]  in the outcome's order: [key] for None, [key, dtype, shape,
                              offset] for a tensor, [key, null, reason] for one dumps could
                              not write (a sparse tensor, ...: load refuses the file, naming it)
    "tensors":  [[dtype, shape, offset], ...]  tensors found inside values
    "events":   [{name: scalar}, ...]  the communication events, flat
    "data":     the length of the data region in bytes (a truncated file fails here)

A tensor is `numel * itemsize` bytes in C order at `offset` (a multiple of ALIGN) from the
start of the data region, its dtype named from DTYPES. Encoded values are JSON with tags
for what JSON lacks: a dict with a single key that starts with NUL is a tag,
    {"\\u0000t": [...]}          a tuple
    {"\\u0000d": [[k, v], ...]}  a dict with int (or bool) keys
    {"\\u0000T": i}              tensor i of "tensors"
    {"\\u0000!": "reason"}       something dumps could not write; load refuses the file
and the keys of a plain dict that start with NUL get one more NUL in front.

Reading costs one read of the file (its size checked against MAX_BYTES first, on the open
descriptor), one json.loads of at most MAX_HEADER bytes holding at most MAX_BRACKETS lists
and objects (both checked before parsing; a header nested too deeply for json is a
ValueError, not a RecursionError), and Python work bounded by MAX_RECORDS, MAX_EVENTS and
MAX_VALUE_ITEMS (values nest at most MAX_VALUE_DEPTH levels); tensors are views of the one
buffer read. Text longer than TEXT_LIMIT characters (EVENT_TEXT_LIMIT in an event) is cut,
with a note, on writing and again on reading: a 14 MB exception message costs the report
nothing later. Worst cases measured (one core): ~0.15 s (20000 records; 8 MB of numbers).

read_json_bounded() reads the small JSON files a rank rewrites while the parent polls them
(its status): at most max_bytes, None for anything that is not JSON nested a few levels.
"""
from __future__ import annotations

import json
import math
import os
import re
import stat
import struct

import torch

# Bound at import, before any code under test runs: patching them later changes what that
# code sees, not what the worker writes.
_dumps, _loads, _frombuffer, _pack = json.dumps, json.loads, torch.frombuffer, struct.pack
_Tensor = torch.Tensor

FORMAT = 3
MAGIC = b"rtp-course outcome 3\n"
ALIGN = 64                  # every tensor starts at a multiple of it: aligned for any dtype
MAX_BYTES = 256 << 20       # a check records kilobytes to a few megabytes (4 MB at most today)
MAX_HEADER = 8 << 20        # ~120 kB at most today (560 events, 306 records)
MAX_BRACKETS = 200_000      # "[" and "{" in the header, counted before it is parsed: json
                            # makes a list or dict for each (8 MB of "[]," takes ~1 s); ~3000
MAX_RECORDS = 20_000        # records and value tensors together; 306 at most today; ~8 us each
MAX_EVENTS = 100_000        # ~560 at most today; ~1 us each
MAX_EVENT_FIELDS = 32       # an event has 7
MAX_VALUE_DEPTH = 20
MAX_VALUE_ITEMS = 100_000   # containers and scalars in all values together; ~1000 today
MAX_DIMS = 64
_MAX_DIM = 1 << 40          # one dimension (an empty tensor's others may be anything)
TEXT_LIMIT = 64 << 10       # characters of one text (message, where, a string in a value)
EVENT_TEXT_LIMIT = 4096     # characters of a text in an event ("file.py:LINE in function")
TEXT_FIELDS = ("status", "type", "message", "where", "phase", "hint")

DTYPES = {name: getattr(torch, name) for name in (
    "float64", "float32", "float16", "bfloat16", "complex128", "complex64",
    "int64", "int32", "int16", "int8", "uint64", "uint32", "uint16", "uint8", "bool",
    "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz")
    if isinstance(getattr(torch, name, None), torch.dtype)}
_NAMES = {dtype: name for name, dtype in DTYPES.items()}
_SIZES = {name: torch.empty(0, dtype=dtype).element_size() for name, dtype in DTYPES.items()}

_TUPLE, _INTDICT, _TENSOR, _BAD = "\0t", "\0d", "\0T", "\0!"
_HEAD = len(MAGIC) + 8
_NOTE = 40                  # characters of "... (cut: N characters)"
_INT_BITS = 4096            # json writes an int as decimal digits: 4300 at most in Python 3.11+


def cut(text: str, limit: int = TEXT_LIMIT) -> str:
    """`text`, or its first `limit` characters and a note of how many more there were (a
    text cut once is not cut again: the note fits in the slack)."""
    if len(text) <= limit + _NOTE:
        return text
    return f"{text[:limit]}... (cut: {len(text) - limit} characters)"


# ------------------------------------------------------------------------------ writing
def _refusal(t) -> str | None:
    """Why tensor `t` cannot go in the file (the sentence follows its name), or None."""
    if not isinstance(t, _Tensor):
        return f"is a {type(t).__name__}, not a tensor"
    if t.layout != torch.strided or t.is_quantized:
        layout = "quantized" if t.layout == torch.strided else t.layout
        return (f"is a {layout} tensor, not a dense one: the checker compares dense tensors "
                f"(.to_dense() gives one)")
    if t.device.type != "cpu":
        return f"is on {t.device}, not a tensor the worker recorded"
    if t.dtype not in _NAMES:
        return f"has dtype {t.dtype}, which the checker does not compare"
    if t.dim() > MAX_DIMS or any(d > _MAX_DIM for d in t.shape):
        return f"has a shape the checker does not compare ({tuple(t.shape)})"
    return None


class _Writer:
    def __init__(self):
        self.tensors = []        # (tensor, offset): every tensor, in the data region's order
        self.value_tensors = []  # [dtype, shape, offset] of those inside values
        self.size = 0
        self.items = 0
        self.over = None         # where the values went over MAX_VALUE_ITEMS

    def place(self, t) -> list:
        """[dtype, shape, offset] of tensor `t`, its bytes to follow in the data region."""
        offset = self.size
        self.tensors.append((t, offset))
        nbytes = t.numel() * t.element_size()
        self.size = -(-(offset + nbytes) // ALIGN) * ALIGN
        return [_NAMES[t.dtype], list(t.shape), offset]

    def value(self, v, where: str, depth: int = 0):
        """`v` as JSON data with tags, or a tag that names what is wrong with it."""
        try:
            return self._value(v, where, depth)
        except Exception as e:  # noqa: BLE001 - an object that lies about its type
            return {_BAD: f"{where} could not be written ({type(e).__name__})"}

    def _value(self, v, where: str, depth: int):
        self.items += 1
        if self.items > MAX_VALUE_ITEMS:
            self.over = self.over or where
            return None
        if v is None or type(v) is bool:
            return v
        if isinstance(v, int):
            v = int.__int__(v)
            return v if v.bit_length() <= _INT_BITS else {_BAD: f"{where} is too big an integer"}
        if isinstance(v, float):
            return float.__float__(v)
        if isinstance(v, str):
            return cut(str.__str__(v))
        if depth >= MAX_VALUE_DEPTH:
            return {_BAD: f"{where} is nested too deeply"}
        if isinstance(v, _Tensor):
            why = _refusal(v)
            if why:
                return {_BAD: f"{where} {why}"}
            self.value_tensors.append(self.place(v.detach()))
            return {_TENSOR: len(self.value_tensors) - 1}
        if isinstance(v, (list, tuple)):
            out = [self.value(x, f"{where}[{i}]", depth + 1) for i, x in enumerate(v)]
            return {_TUPLE: out} if isinstance(v, tuple) else out
        if isinstance(v, dict):
            plain, out = True, []
            for k, x in v.items():
                if not isinstance(k, (str, int)):
                    return {_BAD: f"{where} has a key of type {type(k).__name__}"}
                plain = plain and isinstance(k, str)
                out.append((k, self.value(x, f"{where}[{k!r}]", depth + 1)))
            if not plain:
                return {_INTDICT: [[str.__str__(k) if isinstance(k, str) else
                                    bool(k) if type(k) is bool else int.__int__(k), x]
                                   for k, x in out]}
            out = [(str.__str__(k), x) for k, x in out]
            return {("\0" + k if k.startswith("\0") else k): x for k, x in out}
        return {_BAD: f"{where} is a {type(v).__name__}, not plain data"}

    def record(self, key: str, t) -> list:
        if t is None:
            return [key]
        why = _refusal(t)
        if why:
            return [key, None, why]
        return [key, *self.place(t.detach())]


def _repr(v) -> str:
    try:
        return cut(repr(v), EVENT_TEXT_LIMIT)
    except Exception:  # noqa: BLE001
        return f"a {type(v).__name__}"


def _event(e) -> dict:
    """A communication event as a flat {name: scalar}: anything else as its (cut) repr."""
    if type(e) is not dict:
        e = {"event": _repr(e)}
    out = {}
    for k, v in list(e.items())[:MAX_EVENT_FIELDS]:
        if type(v) is str:
            v = cut(v, EVENT_TEXT_LIMIT)
        elif type(v) is int and v.bit_length() > _INT_BITS:
            v = f"an integer of {v.bit_length()} bits"
        elif v is not None and type(v) not in (bool, int, float):
            v = _repr(v)
        out[k if type(k) is str else _repr(k)] = v
    return out


def dumps(outcome: dict) -> bytes:
    """The outcome dict ({"status", ..., "records": {key: tensor|None}, "values", "events"})
    as the bytes of one file. Never raises for what the outcome holds: what cannot be
    written (a sparse record, an object in values) is written as a refusal that load()
    reports, naming it."""
    w = _Writer()
    records = [w.record(str(key), t) for key, t in dict(outcome.get("records") or {}).items()]
    fields = {}
    for key, v in outcome.items():
        if key in ("records", "events"):
            continue
        if key in TEXT_FIELDS and not (v is None or isinstance(v, str)):
            fields[key] = {_BAD: f"its {key} is not text"}
        else:
            fields[str(key)] = w.value(v, str(key))
        if w.over:               # the rest is not read: only the refusal, where it happened
            fields = {k: v for k, v in fields.items() if k in TEXT_FIELDS}
            fields[str(key)] = {_BAD: f"{w.over} makes the values too big "
                                      f"(over {MAX_VALUE_ITEMS} items)"}
            break
    events = [_event(e) for e in list(outcome.get("events") or [])]   # load() bounds them
    header = _dumps({"outcome": fields, "records": records, "tensors": w.value_tensors,
                     "events": events, "data": w.size}, separators=(",", ":")).encode("ascii")
    start = -(-(_HEAD + len(header)) // ALIGN) * ALIGN
    buf = bytearray(start + w.size)
    buf[:_HEAD] = MAGIC + _pack("<Q", len(header))
    buf[_HEAD:_HEAD + len(header)] = header
    if w.size:
        region = _frombuffer(buf, dtype=torch.uint8)[start:]
        for t, offset in w.tensors:
            if t.numel():
                flat = t.resolve_conj().resolve_neg().reshape(-1)
                region[offset:offset + flat.numel() * flat.element_size()].view(
                    t.dtype).copy_(flat)
    return bytes(buf)


# ------------------------------------------------------------------------------ reading
class _Reader:
    def __init__(self, tensors: list):
        self.tensors = tensors
        self.items = 0

    def value(self, v, depth: int = 0):
        """An encoded value back as Python data."""
        self.items += 1
        if self.items > MAX_VALUE_ITEMS:
            raise ValueError(f"its values hold over {MAX_VALUE_ITEMS} items")
        if v is None or type(v) in (bool, int, float):
            return v
        if type(v) is str:
            return cut(v)
        if depth > MAX_VALUE_DEPTH:          # dumps() writes a refusal at MAX_VALUE_DEPTH
            raise ValueError("its values are nested too deeply")
        if type(v) is list:
            return [self.value(x, depth + 1) for x in v]
        if len(v) == 1:
            (tag, x), = v.items()
            if tag == _TUPLE and type(x) is list:
                return tuple(self.value(y, depth + 1) for y in x)
            if tag == _INTDICT and type(x) is list:
                out = {}
                for pair in x:
                    if not (type(pair) is list and len(pair) == 2
                            and type(pair[0]) in (str, int, bool)):
                        raise ValueError("a dict in its values has a malformed key")
                    out[pair[0]] = self.value(pair[1], depth + 1)
                return out
            if tag == _TENSOR and type(x) is int and 0 <= x < len(self.tensors):
                return self.tensors[x]
            if tag == _BAD:
                raise ValueError(_reason("", x))
        out = {}
        for k, x in v.items():
            if k.startswith("\0"):
                if not k.startswith("\0\0"):
                    raise ValueError("its values hold an unknown tag")
                k = k[1:]
            out[k] = self.value(x, depth + 1)
        return out


def _reason(prefix: str, why) -> str:
    """The one line a refusal written by dumps() says (anything but text: a generic one)."""
    why = why if type(why) is str else "is something the checker cannot read"
    return (prefix + why)[:300].replace("\n", " ")


class _Blobs:
    """The data region, viewed as each dtype once: a tensor is a slice of one of them."""

    def __init__(self, data):
        self.data, self.views = data, {}

    def tensor(self, entry, what: str):
        """The tensor that index entry [dtype, shape, offset] names: a view of the data."""
        if not (type(entry) is list and len(entry) == 3):
            raise ValueError(f"{what} is not [dtype, shape, offset]")
        name, shape, offset = entry
        size = _SIZES.get(name) if type(name) is str else None
        if size is None:
            raise ValueError(f"{what} has an unknown dtype")
        if not (type(shape) is list and len(shape) <= MAX_DIMS
                and all(type(d) is int and 0 <= d <= _MAX_DIM for d in shape)):
            raise ValueError(f"{what} has no shape")
        n = math.prod(shape)
        if not (type(offset) is int and offset >= 0 and offset % ALIGN == 0
                and offset + n * size <= self.data.numel()):
            raise ValueError(f"{what} lies outside the data")
        blob = self.views.get(name)
        if blob is None:
            blob = self.views[name] = self.data.view(DTYPES[name])
        start = offset // size
        try:
            return blob[start:start + n].view(shape)
        except RuntimeError:
            raise ValueError(f"{what} has a shape torch refuses") from None


def _read(path) -> bytearray:
    """The whole file, after checking it is a regular file of at most MAX_BYTES; opened
    without following a link and without blocking (a FIFO, a device: refused)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) \
        | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as e:
        raise ValueError(f"it cannot be opened ({e.strerror or type(e).__name__})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("it is not a regular file")
        if st.st_size > MAX_BYTES:
            raise ValueError(f"it is over {MAX_BYTES >> 20} MB")
        buf = bytearray(st.st_size)
        with open(fd, "rb", buffering=0, closefd=False) as f:
            got = 0
            view = memoryview(buf)
            while got < len(buf):
                n = f.readinto(view[got:])
                if not n:
                    break
                got += n
        if got != len(buf):
            raise ValueError("it changed while it was read")
        return buf
    finally:
        os.close(fd)


def load(path) -> dict:
    """The outcome dict back, records as views of one buffer; ValueError (with a short
    reason) if the file is not one this module wrote (a forged or truncated file fails
    here, without running code), or holds anything but data the verdict can compare."""
    buf = _read(path)
    if len(buf) < _HEAD or buf[:len(MAGIC)] != MAGIC:
        raise ValueError("not an outcome file")
    size, = struct.unpack_from("<Q", buf, len(MAGIC))
    if size > MAX_HEADER:
        raise ValueError(f"its header is over {MAX_HEADER >> 20} MB")
    if _HEAD + size > len(buf):
        raise ValueError("its header runs past the end of the file")
    text = buf[_HEAD:_HEAD + size]
    if text.count(b"[") + text.count(b"{") > MAX_BRACKETS:
        raise ValueError(f"its header holds over {MAX_BRACKETS} lists and objects")
    try:
        header = _loads(text)
    except RecursionError:
        raise ValueError("its header is nested too deeply") from None
    except (ValueError, MemoryError) as e:
        raise ValueError(f"its header is not JSON ({type(e).__name__})") from None
    if not isinstance(header, dict):
        raise ValueError("its header is not an object")
    fields, index, inner, events, nbytes = (header.get(k) for k in (
        "outcome", "records", "tensors", "events", "data"))
    if not (type(fields) is dict and type(index) is list and type(inner) is list
            and type(events) is list and type(nbytes) is int):
        raise ValueError("its header lacks a part")
    start = -(-(_HEAD + size) // ALIGN) * ALIGN
    if len(buf) - start != nbytes or nbytes < 0 or nbytes % ALIGN:
        raise ValueError("its data region is not as long as its header says (cut short?)")
    if len(index) + len(inner) > MAX_RECORDS:
        raise ValueError(f"it has over {MAX_RECORDS} records")
    if len(events) > MAX_EVENTS:
        raise ValueError(f"it has over {MAX_EVENTS} events")
    data = _frombuffer(buf, dtype=torch.uint8)[start:]

    blobs = _Blobs(data)
    records = {}
    for entry in index:
        if not (type(entry) is list and entry and type(entry[0]) is str):
            raise ValueError("a record index entry is not [key, ...]")
        key = entry[0]
        if key in records:
            raise ValueError("a record is listed twice")
        if len(entry) == 1:
            records[key] = None
        elif len(entry) == 3 and entry[1] is None:
            raise ValueError(_reason(f"{key} ", entry[2]))
        else:
            records[key] = blobs.tensor(entry[1:], "a record")

    for e in events:
        if type(e) is not dict or len(e) > MAX_EVENT_FIELDS:
            raise ValueError("its events are not a list of records")
        for k, v in e.items():
            if type(v) is str:
                if len(v) > EVENT_TEXT_LIMIT:
                    e[k] = cut(v, EVENT_TEXT_LIMIT)
            elif v is not None and type(v) not in (bool, int, float):
                raise ValueError("an event holds more than plain numbers and text")

    reader = _Reader([blobs.tensor(e, "a tensor in the values") for e in inner])
    out = {}
    for key, v in fields.items():
        if key in TEXT_FIELDS and not (v is None or type(v) is str):
            if type(v) is dict and len(v) == 1 and _BAD in v:
                reader.value(v)                       # raises, naming the field
            raise ValueError(f"its {key} is not text")
        out[key] = reader.value(v)
    out.update(records=records, events=events)
    return out


_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))


def _nested_within(text: bytes, depth: int) -> bool:
    """Whether the brackets of valid JSON `text` nest at most about `depth` levels (at most
    2 * depth): strings dropped, then innermost pairs removed `depth` times, in C."""
    brackets = _STRING.sub(b"", text).translate(None, _NOT_BRACKETS)
    for _ in range(depth):
        if not brackets:
            return True
        brackets = brackets.replace(b"[]", b"").replace(b"{}", b"")
    return not brackets


def read_json_bounded(path, max_bytes: int = 65536, max_depth: int = 32):
    """The JSON in the file at `path`, or None: if it cannot be opened, is not a regular file,
    holds over `max_bytes` bytes (at most max_bytes + 1 are read), is half written, does not
    parse for any reason (a million nested brackets included), or nests deeper than about
    `max_depth` levels (900 levels parse, and then the caller's repr() of them would fail).
    Any JSON value comes back: the caller checks its type. For a file another process
    writes (a rank's status) and the parent polls many times a second: opened without
    following a link and without blocking (a FIFO is refused, not waited on)."""
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) \
        | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        chunks, got = [], 0
        while got <= max_bytes:
            chunk = os.read(fd, max_bytes + 1 - got)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    if got > max_bytes:
        return None
    text = b"".join(chunks)
    try:
        value = _loads(text)
    except (ValueError, RecursionError, MemoryError, TypeError):
        return None
    return value if _nested_within(text, max_depth) else None
