"""A rank's outcome of one check as a file: written by the worker, read by the parent.

The parent reads some 300 of these per run while the ranks still compute, on the same
cores, so reading must be cheap, and it must never run code (the file is written by a
process that ran the code under test). torch.load(weights_only=True) never runs code,
but its unpickler is pure Python and pays per object: with every recorded tensor and
every communication event as objects of their own it took more CPU than the ranks'
biggest checks. So the outcome is stored as

    {"format": 2, "status", "type", "message", ... (small fields, as they are),
     "values": {...},                      small, as they are
     "events": "<JSON text>",              one string
     "records": "<JSON text>",             [[key, dtype, shape, offset] or [key], ...]
     "blobs": {dtype: one flat tensor},    every recorded tensor of that dtype, end to end
     "other": {key: tensor}}               anything not a plain dense CPU tensor

and read back with the same weights_only loader: a few objects, whatever the size.
"""
from __future__ import annotations

import io
import json

import torch

# Bound at import, before any code under test runs (see worker._save).
_torch_save, _torch_load, _dumps, _loads = torch.save, torch.load, json.dumps, json.loads
FORMAT = 2


def _plain(t) -> bool:
    return type(t) is torch.Tensor and t.layout == torch.strided and not t.is_quantized


def dumps(outcome: dict) -> bytes:
    """The outcome dict ({"status", ..., "records": {key: tensor|None}, "values", "events"})
    as the bytes of one file."""
    out = {k: v for k, v in outcome.items() if k not in ("records", "events")}
    out["format"] = FORMAT
    out["events"] = _dumps(outcome.get("events", []))
    index, pieces, other, sizes = [], {}, {}, {}
    for key, t in outcome.get("records", {}).items():
        if t is None:
            index.append([key])
        elif _plain(t):
            name = str(t.dtype).removeprefix("torch.")
            pieces.setdefault(name, []).append(t.resolve_conj().resolve_neg().reshape(-1))
            index.append([key, name, list(t.shape), sizes.get(name, 0)])
            sizes[name] = sizes.get(name, 0) + t.numel()
        else:
            other[key] = t
            index.append([key, "other"])
    out["records"] = _dumps(index)
    out["blobs"] = {name: torch.cat(ts) for name, ts in pieces.items()}
    out["other"] = other
    buf = io.BytesIO()
    _torch_save(out, buf)
    return buf.getvalue()


MAX_BYTES = 256 << 20     # a check records kilobytes to a few megabytes
_SCALARS = (bool, int, float, str, type(None))


def _validate_value(value, where: str, depth: int = 0) -> None:
    """Small values are data: numbers, strings, lists, str-keyed dicts, dense CPU tensors."""
    if depth > 20:
        raise ValueError(f"{where} is nested too deeply")
    if isinstance(value, _SCALARS):
        return
    if isinstance(value, torch.Tensor):
        _validate_tensor(value, where)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _validate_value(v, f"{where}[{i}]", depth + 1)
    elif isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, (str, int)):
                raise ValueError(f"{where} has a key of type {type(k).__name__}")
            _validate_value(v, f"{where}[{k!r}]", depth + 1)
    else:
        raise ValueError(f"{where} is a {type(value).__name__}, not plain data")


def _validate_tensor(t, where: str) -> None:
    if not _plain(t):
        raise ValueError(f"{where} is a {t.layout} tensor, not a dense one: the checker compares "
                         f"dense tensors (.to_dense() gives one)")
    if t.device.type != "cpu":
        raise ValueError(f"{where} is on {t.device}, not a tensor the worker recorded")


def load(path) -> dict:
    """The outcome dict back, records as views of the blobs; ValueError if the file is not
    one this module wrote (a forged or truncated file fails here, without running code), or
    holds anything but data the verdict can compare: dense CPU tensors, small values."""
    import os
    if os.path.getsize(path) > MAX_BYTES:
        raise ValueError(f"it is over {MAX_BYTES >> 20} MB")
    raw = _torch_load(path, weights_only=True)
    if not isinstance(raw, dict) or raw.get("format") != FORMAT:
        raise ValueError("not an outcome file")
    blobs, other = raw.get("blobs"), raw.get("other")
    if not isinstance(blobs, dict) or not isinstance(other, dict):
        raise ValueError("no records")
    for name, blob in blobs.items():
        _validate_tensor(blob, f"blob {name}")
        if blob.dim() != 1:
            raise ValueError(f"blob {name} is not flat")
    records = {}
    for entry in _loads(raw["records"]):
        if not isinstance(entry, list) or not entry or not isinstance(entry[0], str):
            raise ValueError("a record index entry is not [key, ...]")
        key = entry[0]
        if len(entry) == 1:
            records[key] = None
        elif entry[1] == "other":
            if not isinstance(other.get(key), torch.Tensor):
                raise ValueError(f"record {key!r} is not a tensor")
            _validate_tensor(other[key], key)
            records[key] = other[key]
        else:
            _, name, shape, offset = entry
            blob = blobs[name]
            if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
                raise ValueError(f"record {key!r} has no shape")
            n = torch.Size(shape).numel()
            if not (isinstance(offset, int) and 0 <= offset and offset + n <= blob.numel()):
                raise ValueError(f"record {key!r} lies outside its blob")
            records[key] = blob[offset:offset + n].view(shape)
    events = _loads(raw["events"])
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
        raise ValueError("events are not a list of records")
    for field in ("values", "peak_recv"):
        _validate_value(raw.get(field, {}), field)
    for field in ("status", "type", "message", "where", "phase", "hint"):
        if not isinstance(raw.get(field, ""), (str, type(None))):
            raise ValueError(f"its {field} is not text")
    out = {k: v for k, v in raw.items() if k not in ("format", "blobs", "other")}
    out.update(records=records, events=events)
    return out
