"""Whose inputs a process may draw: per-rank data that only its own rank (and the parent) can make.

A check's inputs are drawn from seeds written in its code, which students can read. A
rank's OWN data (its batch, its shard, the tensor it rotates, its initial weights) is drawn
from the seed mixed with a key of that rank's; data a set of ranks shares (a data-parallel
replica's batch) with the key of that set. The checker's parent process picks a fresh
master key per run and hands rank r only the keys of the sets it belongs to, in a file
rank r reads and deletes before the code under test runs (a confined rank could not open
it anyway). So the answer a rank must produce, which depends on the other ranks' data,
cannot be computed on the rank alone: the serial shortcut ("compute the whole thing here,
skip the communication") needs the other ranks' data, and it can only arrive by
communication. Data every rank shares (a replicated input, the serial model's weights) has
no owner and is drawn from its seed alone.

The parent holds every key, so `expected()` draws what each rank drew. A rank that asks for
another rank's data gets `NotYourInput`, which also keeps a check's parent side useless in
a rank, whatever code was loaded there.
"""
from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import threading
from pathlib import Path

_master: bytearray | None = None      # the parent's: made on first use, never in a rank
_lock = threading.Lock()              # the expectations thread and the launch both ask for it
_rank: int | None = None              # set in a rank: whose key it holds
_rank_keys: dict = {}                 # in a rank: its sets' keys, by label


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


MAX_SET_WORLD = 8    # up to here a rank holds the key of every set of ranks it belongs to


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


def _sets_of(rank: int, world_size: int) -> list:
    """Every set of ranks that holds `rank`: all of them up to MAX_SET_WORLD ranks, else the
    rank alone and the whole world."""
    if world_size > MAX_SET_WORLD:
        return [(rank,), tuple(range(world_size))]
    others = [r for r in range(world_size) if r != rank]
    return [tuple(sorted((rank, *(o for i, o in enumerate(others) if mask >> i & 1))))
            for mask in range(1 << len(others))]


def write_rank_keys(rundir: Path, world_size: int) -> None:
    """One key file per rank, readable by its owner only, read and deleted by the rank: the
    keys of the sets of ranks it belongs to."""
    for r in range(world_size):
        keys = {",".join(map(str, ranks)): owner_key(ranks).hex()
                for ranks in _sets_of(r, world_size)}
        fd = os.open(rundir / f"key.{r}", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            json.dump(keys, fh)


def enter_rank(rank: int, rundir: Path) -> None:
    """In a worker, before the code under test runs: take this rank's keys, forget the rest."""
    global _master, _rank, _rank_keys
    path = rundir / f"key.{rank}"
    _rank_keys = {k: bytes.fromhex(v) for k, v in json.loads(path.read_text()).items()}
    _rank, _master = rank, None
    path.unlink()


def seed(base: int, owner=None) -> int:
    """The generator seed for `base`: `base` itself for shared data, else mixed with the key of
    `owner` (a global rank, or a set of global ranks), which only those ranks and the parent
    hold."""
    if owner is None:
        return base
    if _rank is not None:
        label = ",".join(map(str, _label(owner)))
        if label not in _rank_keys:
            whose = f"rank {owner}'s" if isinstance(owner, int) else f"ranks {label}'"
            raise NotYourInput(f"rank {_rank} asked for {whose} input data, which is drawn from "
                               f"a key only they and the checker hold")
        key = _rank_keys[label]
    else:
        key = owner_key(owner)
    digest = hmac.new(key, b"seed %d" % base, hashlib.sha256).digest()
    return int.from_bytes(digest[:8], "little") >> 1     # a non-negative int64
