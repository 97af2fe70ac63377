"""The test suite's CPU work, per test file: a pytest plugin.

    PYTHONPATH=scripts python -m pytest -q -n 0 -p suite_cpu

On two cores the README's test command keeps both busy, so its time is its CPU work, not
the durations pytest reports (a test that waits for a hang to show costs wall time, little
CPU). Run serially on an otherwise idle machine, each test is charged the whole machine's
busy time (/proc/stat) while it runs, its subprocesses and ranks included; the files are
listed by CPU-seconds at the end.
"""
from __future__ import annotations

import collections
import os

import pytest

_BY_FILE: dict = collections.defaultdict(lambda: [0.0, 0.0, 0])


def _busy_seconds() -> float:
    with open("/proc/stat") as fh:
        ticks = [int(v) for v in fh.readline().split()[1:]]
    return (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")   # less idle, iowait


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    import time
    busy, wall = _busy_seconds(), time.monotonic()
    yield
    row = _BY_FILE[item.nodeid.split("::")[0]]
    row[0] += _busy_seconds() - busy
    row[1] += time.monotonic() - wall
    row[2] += 1


def pytest_terminal_summary(terminalreporter):
    rows = sorted(_BY_FILE.items(), key=lambda kv: -kv[1][0])
    total = sum(r[0] for _, r in rows)
    terminalreporter.write_sep("=", f"CPU-seconds per file ({total:.0f} in all)")
    for path, (cpu, wall, n) in rows:
        terminalreporter.write_line(f"{cpu:8.1f} CPU-s {wall:8.1f} s {n:5d} tests  {path}")
