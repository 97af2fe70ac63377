"""Whose inputs a process may draw: per-rank data that only its own rank (and the parent) can make.

A check's inputs are drawn from seeds written in its code, which students can read. A
rank's OWN data (its batch, its shard, the tensor it rotates, its initial weights) is drawn
from the seed mixed with a key of that rank's; data a set of ranks shares (a data-parallel
replica's batch) with the key of that set. Only the checker's parent holds the keys (a
fresh master key per run): a rank asks the parent for each tensor of its own data, and
for the weights of each module it owns, over a channel of its own (checker/channel.py),
and gets the values, never what they are drawn from (checker/provider.py). So the answer a rank must
produce, which depends on the other ranks' data, cannot be computed on the rank alone: the
serial shortcut ("compute the whole thing here, skip the communication") needs the other
ranks' data, as large as the data itself, and it can only arrive by communication. Data
every rank shares (a replicated input, the serial model's weights) has no owner and is
drawn from its seed alone.

The parent holds every key, so `expected()` draws what each rank drew. A rank that asks for
another rank's data gets `NotYourInput`, which also keeps a check's parent side useless in
a rank, whatever code was loaded there.
"""
from __future__ import annotations

import contextlib
import hashlib
import hmac
import secrets
import threading

_master: bytearray | None = None      # the parent's: made on first use, never in a rank
_lock = threading.Lock()              # the expectations thread and the launch both ask for it
_rank: int | None = None              # set in a rank: which rank this process is
_ask = None                           # in a rank: (request dict, check index) -> (reply, tensors)
_check_index = 0                      # in a rank: the launch's index of the check it is in


class NotYourInput(RuntimeError):
    pass


def _master_key() -> bytearray:
    global _master
    if _rank is not None:
        raise NotYourInput("a rank holds only its own inputs' key")
    with _lock:
        if _master is None:
            _master = bytearray(secrets.token_bytes(32))
        return _master


def forget() -> None:
    """Zero the master key in place: in a process forked from the parent that starts ranks
    (the warm server's forkserver), so that no rank finds it in memory it inherited."""
    global _master
    if _master is not None:
        _master[:] = bytes(len(_master))
        _master = None


def _label(owner) -> tuple:
    ranks = (owner,) if isinstance(owner, int) else tuple(sorted(set(int(r) for r in owner)))
    if not ranks:
        raise ValueError("an owner is a global rank or a non-empty set of them")
    return ranks


def owner_key(owner) -> bytes:
    """The key from which the data of `owner` (a global rank, or a set of them that share the
    data: a data-parallel replica's ranks) is drawn (parent only)."""
    label = ",".join(map(str, _label(owner))).encode()
    return hmac.new(_master_key(), b"ranks " + label, hashlib.sha256).digest()


def enter_rank(rank: int, ask) -> None:
    """In a rank, before the code under test runs: no key here; its own inputs come from the
    parent through `ask(request, check_index)` (checker.channel.ask)."""
    global _master, _rank, _ask
    _rank, _master, _ask = rank, None, ask


def in_rank() -> bool:
    """This process is a rank: its own inputs come from the parent (it holds no key)."""
    return _ask is not None


def ask(request: dict):
    """(reply header, tensors) for a request of this rank's own inputs (a rank only)."""
    if isinstance(request.get("owner"), list):
        label = ",".join(map(str, request["owner"]))
        if _rank not in request["owner"]:
            whose = f"rank {label}'s" if len(request["owner"]) == 1 else f"ranks {label}'"
            raise NotYourInput(f"rank {_rank} asked for {whose} input data, which is drawn "
                               f"from a key only they and the checker hold")
    return _ask(request, _check_index)


def label(owner) -> list:
    """`owner` (a global rank or a set of them) as the sorted list the parent is asked with."""
    return list(_label(owner))


def seed(base: int, owner=None) -> int:
    """The generator seed for `base`: `base` itself for shared data, else mixed with the key of
    `owner` (a global rank, or a set of global ranks), which only the parent holds."""
    if owner is None:
        return base
    if _ask is not None or _rank is not None:
        raise NotYourInput(f"rank {_rank} holds no key: its own data comes from the checker "
                           f"(common.randn / rand / randint / owned_module ask for it)")
    key = owner_key(owner)
    message = (b"seed %d" % base) + (b" of " + _scope.check.encode() if _scope.check else b"")
    digest = hmac.new(key, message, hashlib.sha256).digest()
    return int.from_bytes(digest[:8], "little") >> 1     # a non-negative int64


# Whose check a draw belongs to: a rank's own data differs from check to check, so what a
# rank is given (or asks for) in one check is no use in another. Per thread: the parent
# computes expected values in one thread and serves the ranks' requests in another.
class _Scope(threading.local):
    check = ""


_scope = _Scope()


@contextlib.contextmanager
def scope(check_id: str):
    """Draws inside are check `check_id`'s (the parent's expected values, a request served)."""
    before = getattr(_scope, "check", "")
    _scope.check = check_id
    try:
        yield
    finally:
        _scope.check = before


def enter_check(check_id: str, index: int) -> None:
    """In a rank: the check it is in now (`index` in its launch), whose data it asks for."""
    global _check_index
    _scope.check, _check_index = check_id, index


# --- the parent's side: each rank's own inputs, on its request (checker/channel.py) ---
