"""The watchdog's accounting of what the ranks use, on a fake /proc and a fake clock: what
decides "hung", "starved" and the CPU charged, with no race against a real scheduler."""
from types import SimpleNamespace

import pytest

from rtp_course.checker import watchdog
from rtp_course.runtime import procstat

SAMPLE = watchdog.SAMPLE


class FakeProc:
    """Per pid: live threads {tid: (cpu s, waited s)}, CPU of ended threads, reaped CPU."""

    def __init__(self):
        self.threads, self.ended, self.reaped = {}, {}, {}

    def run(self, pid, tid, cpu=0.0, waited=0.0):
        c, w = self.threads.setdefault(pid, {}).get(tid, (0.0, 0.0))
        self.threads[pid][tid] = (c + cpu, w + waited)

    def end(self, pid, tid):
        c, _ = self.threads[pid].pop(tid)
        self.ended[pid] = self.ended.get(pid, 0.0) + c

    def usage(self, pid):
        if pid not in self.threads:
            return None
        live = self.threads[pid]
        group = sum(c for c, _ in live.values()) + self.ended.get(pid, 0.0)
        waited = {str(t): w for t, (_, w) in live.items()}
        return procstat.Usage(group, waited, self.reaped.get(pid, 0.0))


@pytest.fixture
def proc(monkeypatch):
    fake = FakeProc()
    monkeypatch.setattr(procstat, "usage", fake.usage)
    monkeypatch.setattr(watchdog.reaper, "descendants", lambda pid: set())
    return fake


def ranks(*pids):
    return [SimpleNamespace(pid=p) for p in pids]


def looks(usage, procs, steps, between):
    """`steps` samples SAMPLE s apart, `between(i)` run before each; the samples after the first."""
    out = []
    for i in range(steps):
        between(i)
        out.append(usage.sample(procs, 100.0 + i * SAMPLE))
    return out[1:]


def test_threads_that_end_between_two_looks_are_charged_and_keep_the_rank_alive(proc):
    """A rank whose main thread sleeps on the GIL while short-lived threads compute: each
    thread ends before the next look. Its CPU is charged and it is never blocked."""
    proc.run(1, 1)
    tid = iter(range(100, 10_000))

    def churn(_):
        for _ in range(8):             # eight threads, each born and ended between two looks
            t = next(tid)
            proc.run(1, t, cpu=0.02, waited=0.01)
            proc.end(1, t)
    samples = looks(watchdog._Usage(1), ranks(1), 6, churn)
    assert all(abs(used - 8 * 0.02) < 1e-9 for _, used, _, _ in samples), samples
    assert not any(blocked for _, _, blocked, _ in samples), samples


def test_a_main_thread_asleep_while_its_threads_wait_for_a_cpu_is_not_a_hang(proc):
    """The machine is busy: the rank's worker threads are runnable but get no CPU, its main
    thread waits on them. No CPU is used, yet nothing is hung: the rank waits for a CPU."""
    proc.run(1, 1)
    proc.run(1, 2)

    def starved(_):
        proc.run(1, 2, cpu=0.001, waited=0.9 * SAMPLE)
    samples = looks(watchdog._Usage(1), ranks(1), 6, starved)
    assert not any(blocked for _, _, blocked, _ in samples), samples


def test_ranks_that_wait_for_each_other_are_blocked_though_a_transport_thread_wakes(proc):
    """A deadlock: the main threads sleep; gloo's loop thread wakes now and then (a few
    microseconds, and a short wait for a CPU on a busy machine). Every rank is blocked."""
    for pid in (1, 2):
        proc.run(pid, pid)
        proc.run(pid, pid + 10)

    def polling(_):
        for pid in (1, 2):
            proc.run(pid, pid + 10, cpu=0.0002, waited=0.02 * SAMPLE)
    samples = looks(watchdog._Usage(2), ranks(1, 2), 6, polling)
    assert all(blocked and not starved for _, _, blocked, starved in samples), samples


def test_many_transport_threads_that_each_wait_a_little_do_not_hide_a_deadlock(proc):
    """A rank late in a launch has a gloo loop thread per group it made; on a busy machine
    each waits a little at every wake-up. Added up they pass any threshold: each alone does
    not, and the deadlocked ranks are blocked."""
    for pid in (1, 2):
        proc.run(pid, pid)
        for t in range(40):
            proc.run(pid, 100 * pid + t)

    def polling(_):
        for pid in (1, 2):
            for t in range(40):
                proc.run(pid, 100 * pid + t, cpu=0.00005, waited=0.03 * SAMPLE)
    samples = looks(watchdog._Usage(2), ranks(1, 2), 6, polling)
    assert all(blocked and not starved for _, _, blocked, starved in samples), samples


@pytest.mark.parametrize("waiting", [2, 1], ids=["a worker thread, the main one asleep", "the main thread"])
def test_a_rank_whose_thread_waits_for_a_cpu_is_starved_not_blocked(proc, waiting):
    """Not a hang, and not slow either: the machine keeps the rank's threads from a CPU."""
    proc.run(1, 1)
    proc.run(1, 2)

    def starved(_):
        proc.run(1, waiting, cpu=0.001, waited=0.8 * SAMPLE)
    samples = looks(watchdog._Usage(1), ranks(1), 4, starved)
    assert all(starved and not blocked for _, _, blocked, starved in samples), samples


def test_a_rank_kept_waiting_by_its_own_threads_is_not_starved(proc):
    """Its main thread waits for a CPU its own threads hold: the rank is busy computing
    (too slow, if it goes on), not starved by the machine."""
    proc.run(1, 1)
    proc.run(1, 2)

    def own_threads(_):
        proc.run(1, 1, cpu=0.0, waited=0.8 * SAMPLE)
        proc.run(1, 2, cpu=SAMPLE)
    samples = looks(watchdog._Usage(1), ranks(1), 4, own_threads)
    assert not any(starved or blocked for _, _, blocked, starved in samples), samples


def test_a_process_that_ended_is_charged_once(proc, monkeypatch):
    """A rank's child that computed and ended: its CPU comes back in the parent's reaped time,
    and is not charged twice."""
    proc.run(1, 1)
    proc.run(2, 2)
    usage = watchdog._Usage(1)
    monkeypatch.setattr(watchdog.reaper, "descendants", lambda pid: {2} if pid == 1 else set())
    usage.sample(ranks(1), 100.0)
    proc.run(2, 2, cpu=0.2)
    _, used, _, _ = usage.sample(ranks(1), 100.0 + SAMPLE)
    assert used == pytest.approx(0.2)
    del proc.threads[2]                    # it ends; its parent reaps its 0.2 s
    proc.reaped[1] = 0.2
    _, used, _, _ = usage.sample(ranks(1), 100.0 + 2 * SAMPLE)
    assert used == pytest.approx(0.0)


def test_a_pause_of_the_watchdog_itself_tells_nothing(proc):
    """This process was not scheduled for a second: no rank is called blocked for it."""
    proc.run(1, 1)
    usage = watchdog._Usage(1)
    usage.sample(ranks(1), 100.0)
    dt, _, blocked, starved = usage.sample(ranks(1), 100.0 + 5 * SAMPLE)
    assert (dt, blocked, starved) == (0.0, False, False)


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self):
        return self.now


def watch_one_check(tmp_path, monkeypatch, proc, ticks, each):
    """Drive a Watchdog over two ranks in check 0 for `ticks` samples, `each(i)` run before
    each (it may rewrite statuses and add CPU); the Stuck it raised, or None."""
    clock = Clock()
    monkeypatch.setattr(watchdog, "STACKS_WAIT", 0.0)
    check = SimpleNamespace(id="rotation.rotate", exercise="rotation", cpu_budget=30.0)
    for pid in (1, 2):
        proc.run(pid, pid)

    def status(rank, call):
        (tmp_path / f"status.{rank}.json").write_text(
            f'{{"index": 0, "check": "rotation.rotate", "phase": "run", '
            f'"call": "wait() on irecv #{call}"}}')
    for r in (0, 1):
        status(r, 0)
    dog = watchdog.Watchdog(tmp_path, 2, [check], watchdog.B.Budgets(), clock=clock)
    procs = [SimpleNamespace(pid=p, is_alive=lambda: False) for p in (1, 2)]
    try:
        for i in range(ticks):
            each(i, status)
            dog(procs)
            clock.now += SAMPLE
    except watchdog.Stuck as stuck:
        return stuck, clock.now - 100.0
    return None, clock.now - 100.0


def test_a_hang_whose_status_keeps_changing_is_a_hang(tmp_path, monkeypatch, proc):
    """Every rank posts a receive each second that never completes: its status changes, it
    leaves no check, and no rank computes. A hang once blocked HUNG_IN_ALL x STALL seconds in
    all, not a check that runs to the backstop (a status is the rank's word: it may stop the
    ranks sooner, never later)."""
    def posting(i, status):
        if i % 4 == 0:
            for r in (0, 1):
                status(r, i)
    stuck, after = watch_one_check(tmp_path, monkeypatch, proc, 200, posting)
    assert stuck is not None and stuck.reason == "hang", stuck
    assert after < watchdog.HUNG_IN_ALL * watchdog.B.STALL + 2, after
    assert "in all" in stuck.why, stuck.why


def test_a_hung_rank_that_waits_for_a_cpu_now_and_then_is_still_hung(tmp_path, monkeypatch, proc):
    """On a busy machine a hung rank woken by its timer waits for a CPU: each such sample
    ends the stall, but the time blocked in all still makes a hang."""
    def waking(i, status):
        if i % 3 == 0:
            proc.run(1, 1, cpu=0.0, waited=0.8 * SAMPLE)
    stuck, after = watch_one_check(tmp_path, monkeypatch, proc, 400, waking)
    assert stuck is not None and stuck.reason == "hang", stuck
    assert after < 1.5 * watchdog.HUNG_IN_ALL * watchdog.B.STALL + 2, after


def test_a_rank_that_computes_ends_the_stall(tmp_path, monkeypatch, proc):
    """Rank 1 computes now and then while rank 0 waits for it: never a hang."""
    def computing(i, status):
        if i % 8 == 0:
            proc.run(2, 2, cpu=0.5 * SAMPLE)
    stuck, _ = watch_one_check(tmp_path, monkeypatch, proc, 120, computing)
    assert stuck is None, stuck
