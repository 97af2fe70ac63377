"""What a collective gives each rank, from every member's part (the relay's arithmetic).

`complete(op, parts, members)` takes the members' parts in group-rank order (each with its
`header` and `tensors`, as the relay read them) and returns each member's tensors, or raises
`OpError` when the parts do not fit together: every member must post the same collective
with the same sizes, dtypes, root and reduce op.
"""
from __future__ import annotations

import math

import torch

from rtp_course.runtime.relay import wire

REDUCE_OPS = ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR")


class OpError(Exception):
    """An operation the ranks cannot complete together. With `said`, the message details
    other ranks' parts: the ranks are told only `said` and a note's number (what one rank
    posted never reaches another, not even in an error), the report "said: message"."""

    def __init__(self, message: str, said: str | None = None):
        super().__init__(message)
        self.said = said


def describe(spec) -> str:
    return f"{spec[0]} {list(spec[1])}"


def _reduce(op: str, tensors: list) -> torch.Tensor:
    if op not in REDUCE_OPS:
        raise OpError(f"reduce op {op} is not supported (use SUM, AVG, PRODUCT, MIN, MAX or a "
                      f"bitwise op)")
    first = tensors[0]
    if op in ("BAND", "BOR", "BXOR") and (first.is_floating_point() or first.is_complex()):
        raise OpError(f"reduce op {op} on a {first.dtype} tensor: bitwise ops take integers")
    acc = first.clone()
    for t in tensors[1:]:
        if op in ("SUM", "AVG"):
            acc += t
        elif op == "PRODUCT":
            acc *= t
        elif op == "MIN":
            torch.minimum(acc, t, out=acc)
        elif op == "MAX":
            torch.maximum(acc, t, out=acc)
        elif op == "BAND":
            acc &= t
        elif op == "BOR":
            acc |= t
        else:
            acc ^= t
    if op == "AVG":
        if acc.is_floating_point() or acc.is_complex():
            acc /= len(tensors)
        else:
            acc //= len(tensors)
    return acc


def _same(op: str, ordered, members, what) -> None:
    """Every member posted the same `what` (a function of a _Posted), or an OpError saying who."""
    first = what(ordered[0])
    for m, p in zip(members[1:], ordered[1:]):
        mine = what(p)
        if mine != first:
            raise OpError(f"rank {members[0]} gave {_explain(first)}, rank {m} gave "
                          f"{_explain(mine)}", f"the ranks' {op} calls do not match")


def _explain(x) -> str:
    if isinstance(x, tuple) and x and x[0] == "op":
        return str(x[1])
    if isinstance(x, list):       # tensor specs
        return " + ".join(f"a {describe(s)} tensor" for s in x) or "no tensor"
    return str(x)


def _specs(p):
    return [wire.spec(t) for t in p.tensors]


def complete(op: str, ordered: list, members) -> list:
    """What each member gets back, in members' order."""
    n = len(members)
    kinds = [p.header.get("op") for p in ordered]
    if len(set(kinds)) > 1:
        raise OpError(", ".join(f"rank {m} called {k}" for m, k in zip(members, kinds)),
                      "the ranks' collective calls do not match")
    h0 = ordered[0].header
    if op == "barrier":
        return [[] for _ in ordered]
    if op in ("all_reduce", "reduce", "reduce_scatter"):
        _same(op, ordered, members, lambda p: ("op", p.header.get("red")))
    if op in ("broadcast", "reduce", "gather", "scatter"):
        _same(op, ordered, members, lambda p: ("op", f"root {p.header.get('root')}"))
        root = h0.get("root")
        if type(root) is not int or not 0 <= root < n:
            raise OpError(f"{op} with root {root}, not a rank of the group")
    red = h0.get("red")
    if op == "all_reduce":
        _same(op, ordered, members, _specs)
        out = [_reduce(red, [p.tensors[i] for p in ordered]) for i in range(len(h0["t"]))]
        return [out for _ in ordered]
    if op == "reduce":
        _same(op, ordered, members, _specs)
        out = [_reduce(red, [p.tensors[i] for p in ordered]) for i in range(len(h0["t"]))]
        return [out if i == root else [] for i in range(n)]
    if op == "all_gather":
        _same(op, ordered, members, _specs)
        k = len(ordered[0].tensors)
        out = [p.tensors[j] for j in range(k) for p in ordered]
        return [out for _ in ordered]
    if op == "gather":
        _same(op, ordered, members, _specs)
        k = len(ordered[0].tensors)
        return [[p.tensors[j] for j in range(k) for p in ordered] if i == root else []
                for i in range(n)]
    if op == "reduce_scatter":
        _same(op, ordered, members, _specs)
        k = len(ordered[0].tensors)
        if k % n:
            raise OpError(f"reduce_scatter with {k} input pieces on {n} ranks")
        per = k // n           # outputs per rank; piece (j, i) at index j * n + i
        return [[_reduce(red, [p.tensors[j * n + i] for p in ordered]) for j in range(per)]
                for i in range(n)]
    if op == "broadcast":
        data = ordered[root].tensors
        want = [p.header.get("want", []) for p in ordered]
        for i, w in enumerate(want):
            if i != root and [[s[0], s[1]] for s in w] != [wire.spec(t) for t in data]:
                raise OpError(
                    f"it sends {[describe(wire.spec(t)) for t in data]}, rank {members[i]}'s "
                    f"buffer is {[describe(s) for s in w]} (the same shape and dtype on every "
                    f"rank)", f"broadcast from rank {members[root]}: the buffers do not match "
                              f"what it sends")
        return [[] if i == root else data for i in range(n)]
    if op == "scatter":
        pieces = ordered[root].tensors
        if len(pieces) != n:
            raise OpError(f"{len(pieces)} pieces to {n} ranks",
                          f"scatter from rank {members[root]}: not one piece per rank")
        for i, p in enumerate(ordered):
            w = p.header.get("want", [])
            if len(w) != 1 or [w[0][0], w[0][1]] != wire.spec(pieces[i]):
                raise OpError(
                    f"rank {members[i]}'s piece is {describe(wire.spec(pieces[i]))}, its buffer "
                    f"{[describe(s) for s in w]}",
                    f"scatter from rank {members[root]}: a piece that does not fit its buffer")
        return [[pieces[i]] for i in range(n)]
    if op == "all_to_all":
        for p in ordered:
            if len(p.tensors) != n or len(p.header.get("want", [])) != n:
                raise OpError(f"rank {p.conn.rank} gave {len(p.tensors)} pieces for {n} ranks",
                              "all_to_all: not one piece per rank")
        out = []
        for i, p in enumerate(ordered):
            got = []
            for j, q in enumerate(ordered):
                piece, w = q.tensors[i], p.header["want"][j]
                if wire.spec(piece)[0] != w[0] or math.prod(wire.spec(piece)[1]) != math.prod(w[1]):
                    raise OpError(f"rank {members[j]} sends rank {members[i]} "
                                  f"{describe(wire.spec(piece))}, which expects {describe(w)}",
                                  "all_to_all: a piece that does not fit its buffer")
                got.append(piece)
            out.append(got)
        return out
    raise OpError(f"unknown collective {op}")
