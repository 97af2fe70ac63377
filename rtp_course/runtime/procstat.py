"""How much CPU a process used, and how long it waited for one, read from /proc.

The checker's budgets are CPU time, not wall time, so that a busy machine never turns a
correct submission into a slow one. The scheduler's statistics of each thread
(/proc/<pid>/task/<tid>/schedstat: nanoseconds on a CPU, nanoseconds runnable but waiting
for one) tell three states of a rank apart:

* working: its threads use CPU time;
* blocked (a deadlock, a sleep): almost no CPU time, and its main thread does not wait to
  run. Transport threads still wake up now and then (gloo's loop polls 100 times a
  second: a few microseconds each), so "almost no" is a fraction of a percent;
* starved by a busy machine: its main thread is runnable most of the time but waits.
"""
from __future__ import annotations

import os
from typing import NamedTuple


def _schedstat(pid: int, tid) -> tuple[int, int]:
    try:
        with open(f"/proc/{pid}/task/{tid}/schedstat", "rb") as fh:
            fields = fh.read(256).split()
        return int(fields[0]), int(fields[1])
    except (OSError, IndexError, ValueError):
        return 0, 0


def _stat_cpu(pid: int) -> tuple[float, float] | None:
    """(utime + stime of the whole thread group, ended threads included; cutime + cstime:
    the children it reaped), in seconds, None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            text = fh.read(4096)
    except OSError:
        return None
    fields = text[text.rfind(b")") + 2:].split()   # after the command name, which may hold spaces
    try:
        tick = os.sysconf("SC_CLK_TCK")
        return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick
    except (IndexError, ValueError):
        return None


class Usage(NamedTuple):
    """One look at a process, in seconds since it (or each thread) started."""
    cpu: float                # on a CPU, all its threads (ended ones included)
    waited: dict              # tid -> that live thread's time runnable but waiting
    reaped: float             # CPU of the children it reaped


def usage(pid: int) -> Usage | None:
    """How `pid` has used the CPU so far, None if it is gone (waits are 0 where the kernel
    keeps no scheduler statistics). The CPU counts threads that have ended (the thread
    group's total in /proc/<pid>/stat): a thread started and ended between two looks still
    costs its time. The waits of each thread tell a rank whose main thread sleeps (on the
    GIL, on a lock) while its other threads wait for a CPU from a rank that waits for nothing."""
    cpu = 0
    waited = {}
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tasks:
        on_cpu, waits = _schedstat(pid, tid)
        cpu += on_cpu
        waited[tid] = waits / 1e9
    group, reaped = _stat_cpu(pid) or (0.0, 0.0)
    return Usage(max(cpu / 1e9, group), waited, reaped)


def cpu_seconds(pid: int) -> float | None:
    """utime + stime of the whole process (clock ticks), None if it is gone."""
    both = _stat_cpu(pid)
    return None if both is None else both[0]
