"""Frames between a rank and the checker's parent: a length prefix, a JSON header, raw bytes.

    frame   := u32 header_len | u64 payload_len | header (UTF-8 JSON object) | payload
    header  := {..., "t": [[dtype, [d0, d1, ...]], ...]}   the tensors of the payload, in order

A frame says how long it is before anything is allocated, and both lengths are bounded:
the parent reads frames written by a process that runs code under test. Nothing is unpickled.
"""
from __future__ import annotations

import json
import math
import struct

import torch

PREFIX = struct.Struct("<IQ")
MAX_HEADER = 1 << 16            # bytes of JSON: a few tensor specs and names
MAX_PAYLOAD = 64 << 20          # bytes of tensors in one frame (a check's inputs are kilobytes)
MAX_TENSORS = 4096              # tensors in one frame (a module's state)
MAX_DIMS = 16

DTYPES = {str(d).replace("torch.", ""): d for d in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.complex64,
    torch.complex128, torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8,
    torch.bool)}


class ProtocolError(ValueError):
    """A frame that is not one: the parent ends that rank's channel."""


def dtype_name(t: torch.Tensor) -> str:
    name = str(t.dtype).replace("torch.", "")
    if name not in DTYPES:
        raise TypeError(f"a {name} tensor cannot be sent to a rank (inputs are "
                        f"{', '.join(DTYPES)})")
    return name


def spec(t: torch.Tensor) -> list:
    return [dtype_name(t), list(t.shape)]


def nbytes_of(spec_) -> int:
    dtype, shape = spec_
    return math.prod(shape) * DTYPES[dtype].itemsize


def raw(t: torch.Tensor) -> memoryview:
    """The tensor's bytes (a contiguous copy if it is not contiguous), without torch's
    subclass dispatch (a host tensor of the placement rules is plain data here)."""
    with torch._C.DisableTorchFunctionSubclass():
        flat = t.detach().contiguous().reshape(-1)
        if flat.dtype == torch.bool:
            flat = flat.view(torch.uint8)
        return memoryview(flat.view(torch.uint8).numpy()).cast("B")


def encode(header: dict, tensors=()) -> list:
    """The buffers of one frame (for sendmsg / sendall in order)."""
    header = dict(header, t=[spec(t) for t in tensors])
    text = json.dumps(header, separators=(",", ":")).encode()
    if len(text) > MAX_HEADER:
        raise ValueError(f"a header of {len(text)} bytes (at most {MAX_HEADER})")
    bodies = [raw(t) for t in tensors]
    size = sum(b.nbytes for b in bodies)
    if size > MAX_PAYLOAD:
        raise ValueError(f"{size} bytes in one call: at most {MAX_PAYLOAD >> 20} MB")
    return [PREFIX.pack(len(text), size), text, *bodies]


def check_prefix(header_len: int, payload_len: int) -> None:
    if header_len > MAX_HEADER or payload_len > MAX_PAYLOAD:
        raise ProtocolError(f"a frame of {header_len} + {payload_len} bytes")


def decode_header(text: bytes, payload_len: int) -> dict:
    """The header, its tensor specs validated against the payload's length."""
    try:
        header = json.loads(text)
    except (ValueError, UnicodeDecodeError) as e:
        raise ProtocolError(f"a header that is not JSON ({e})") from None
    if not isinstance(header, dict):
        raise ProtocolError("a header that is not an object")
    specs = header.get("t", [])
    if not isinstance(specs, list) or len(specs) > MAX_TENSORS:
        raise ProtocolError("tensor specs that are not a short list")
    total = 0
    for s in specs:
        if not (isinstance(s, list) and len(s) == 2 and s[0] in DTYPES
                and isinstance(s[1], list) and len(s[1]) <= MAX_DIMS
                and all(type(d) is int and 0 <= d < (1 << 40) for d in s[1])):
            raise ProtocolError(f"a tensor spec {str(s)[:80]}")
        total += nbytes_of(s)
    if total != payload_len:
        raise ProtocolError(f"tensor specs of {total} bytes for a payload of {payload_len}")
    return header


def tensors_of(header: dict, payload) -> list[torch.Tensor]:
    """The payload's tensors (views of `payload`, a writable buffer)."""
    out, offset = [], 0
    flat = torch.frombuffer(payload, dtype=torch.uint8) if len(payload) else \
        torch.empty(0, dtype=torch.uint8)
    for dtype, shape in header.get("t", []):
        n = nbytes_of([dtype, shape])
        piece = flat[offset:offset + n]
        offset += n
        kind = DTYPES[dtype]
        t = piece.view(torch.bool) if kind == torch.bool else piece.view(kind)
        out.append(t.reshape(shape))
    return out


def send(sock, buffers) -> None:
    """A frame's buffers to a blocking socket, in one system call where it takes them all."""
    views = [memoryview(b).cast("B") for b in buffers]
    while views:
        sent = sock.sendmsg(views)
        while views and sent >= views[0].nbytes:
            sent -= views[0].nbytes
            views.pop(0)
        if views and sent:
            views[0] = views[0][sent:]


def read_exact(stream, n: int) -> bytearray:
    """n bytes from a blocking binary stream (a socket's makefile), or EOFError when it
    closes first."""
    buf = bytearray(n)
    view, got = memoryview(buf), 0
    while got < n:
        k = stream.readinto(view[got:])
        if not k:
            raise EOFError("the channel closed")
        got += k
    return buf


def read_frame(stream) -> tuple[dict, bytearray]:
    """One frame from a blocking binary stream (the rank's side: it trusts the parent)."""
    header_len, payload_len = PREFIX.unpack(read_exact(stream, PREFIX.size))
    check_prefix(header_len, payload_len)
    header = decode_header(bytes(read_exact(stream, header_len)), payload_len)
    return header, read_exact(stream, payload_len)
