"""The worker side of the checker: runs checks on one rank, with the code under test.

Each check gets a fresh process group (so one check's mismatched collectives
cannot poison the next), and its observations are saved to a file per rank
as soon as it ends, so the parent can judge whatever finished even if a later
check deadlocks. After each check the ranks meet (not on a collective: through
the launch's TCP store): if a rank failed and its peers do not arrive, it exits,
and the parent relaunches the remaining checks. Grading adds confinement
(rtp_course/confinement) between loading the checks and importing the code under test.
"""
from __future__ import annotations

import contextlib
import datetime
import dis
import json
import os
import queue
import sys
import threading
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from rtp_course.checker import channel, inputs, outcome_file, registry
from rtp_course.checker.common import manual_seed
from rtp_course.checker.registry import load_checks
from rtp_course.checker.types import DONE
from rtp_course.course.impl import code_files, exercise, load_impl, refuse_reference_imports
from rtp_course.runtime import asked, commlog, devices, gpu_placement, nccl
from rtp_course.runtime.commlog import sentry
from rtp_course.runtime.launcher import own_channel, rank_device

GRACE_AFTER_FAILURE = 3.0  # s a failed rank waits for its peers before leaving
# Bound before any code under test runs: patching os._exit or dist.new_group later changes
# what that code sees, not how the harness leaves or makes its groups (outcome_file binds
# torch.save likewise).
_exit, _new_group = os._exit, dist.new_group


class ExitCalled(BaseException):
    """Code under test called os._exit: raised instead, so the report can say where."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code


_RANK_PID = os.getpid()


def _refuse_exit(code=0):
    _end_if_forked(code)
    raise ExitCalled(code)


def _end_if_forked(code=1) -> None:
    """In a process the code under test forked (a copy of this rank), an exit or exception
    that reaches the harness ends that process: it never goes on as the rank."""
    if os.getpid() != _RANK_PID:
        _exit(code)


class Status:
    """The rank's current check, phase and call, for the parent's watchdog (which reads it as
    a types.RankStatus: the keys given to update() are that class's fields).

    Updated on every communication call and wait(), so it is written in place with one
    pwrite (padded with spaces over a longer previous text): a temporary file and a rename
    per update cost ~1 ms each on a busy disk, most of a check's time. A reader that
    catches a half-written text gets invalid JSON and reads again at its next poll.
    """

    def __init__(self, path: Path):
        self.path, self.data, self._size = path, {}, 0
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def update(self, **kw):
        self.data.update(kw)
        text = json.dumps(self.data).encode()
        os.pwrite(self._fd, text.ljust(self._size), 0)
        self._size = max(self._size, len(text))


class _Impl:
    """`ctx.impl.comm` imports exercise module `comm` from the implementation under test."""

    def __getattr__(self, name):
        return exercise(name)


class _Meeting:
    """How a launch's ranks meet without a collective, through the launch's TCP store: between
    checks, and for a check that orders its ranks (ctx.flag / ctx.wait_flags /
    ctx.first_other). Only that a rank got somewhere crosses, never data."""

    def __init__(self, rank: int, world_size: int):
        self.rank, self.world_size = rank, world_size
        self.store = c10d._get_default_store()
        self.check = 0

    def start(self, i: int) -> None:
        self.check = i

    def after_check(self, ok: bool) -> bool:
        """Every rank is done with the check (False: a peer did not come within the grace a
        failed check gives it)."""
        wait = GRACE_AFTER_FAILURE if not ok else 24 * 3600
        self.store.set(f"done/{self.check}/{self.rank}", "1")
        try:
            self.store.wait([f"done/{self.check}/{r}" for r in range(self.world_size)],
                            datetime.timedelta(seconds=wait))
            return True
        except Exception:  # noqa: BLE001 - peers are stuck inside a call this rank abandoned
            return False

    def flag(self) -> None:
        self.store.set(f"check{self.check}/flag/{self.rank}", "1")

    def wait_flags(self, ranks) -> None:
        self.store.wait([f"check{self.check}/flag/{r}" for r in ranks],
                        datetime.timedelta(days=1))      # the watchdog stops a hang

    def first_other(self, text: str):
        self.store.set(f"check{self.check}/same/{self.rank}", text)
        return next((r for r in range(self.world_size)
                     if self.store.get(f"check{self.check}/same/{r}").decode() != text), None)


class Ctx:
    def __init__(self, rank, world_size, group, device, dtype, status, meeting):
        self.rank, self.world_size, self.group = rank, world_size, group
        self.device, self.dtype = device, dtype
        self.impl = _Impl()
        self.records, self.values = {}, {}
        self.failed_phase = None
        self._status = status
        self._meeting = meeting

    @contextlib.contextmanager
    def phase(self, name: str):
        commlog.set_phase(name)
        self._status.update(phase=name)
        try:
            yield
        except BaseException:
            self.failed_phase = name
            raise
        finally:
            commlog.set_phase("between phases")

    # A check that orders its ranks (no data crosses: only that a rank got somewhere)
    def flag(self) -> None:
        """This rank has reached the check's flag point."""
        self._meeting.flag()

    def wait_flags(self, ranks, hint_key: str, what: str) -> None:
        """Wait until every rank of `ranks` reached its flag point. If they never do, the
        watchdog stops the hang, and the report says the check waited for `what`, with the
        check's hint for `hint_key`."""
        ranks = list(ranks)
        self._status.update(call=f"the check's wait for rank(s) {ranks} {what}",
                            family="harness", peer=None, hint_key=hint_key)
        try:
            self._meeting.wait_flags(ranks)
        finally:
            self._status.update(call=None, family=None, hint_key=None)

    def first_other(self, text: str):
        """The first rank whose `text` differs from this rank's (None: every rank's is the
        same); the other ranks' texts are never seen here."""
        return self._meeting.first_other(text)

    def warm_up_ring(self, group=None) -> None:
        """One transfer each way with both ring neighbours, batched and not, outside the log:
        NCCL connects a pair at its first transfer and blocks the host until the peer takes
        part, so a check that holds one rank back would see the others block in a call that
        only posts. Gloo connected its pairs when the group was made: nothing changes."""
        with commlog.unlogged():
            nccl.warm_up_ring(group or self.group, self.device)

    def record(self, key: str, tensor) -> None:
        sentry.look()       # a trace hook still set as the code under test returns
        if tensor is None:
            self.records[key] = None
        else:  # a plain tensor even if the code under test returned a host tensor
            # torch's detach, not the object's: the code may have given it a class whose own
            # detach() answers with another tensor (runtime/asked); a GPU run copies to the host
            with torch._C.DisableTorchFunction():
                t = asked.detach(tensor) if asked.is_tensor(tensor) else tensor.detach()
                t = t.to("cpu", copy=True)
                self.records[key] = t if type(t) is torch.Tensor else t.as_subclass(torch.Tensor)

    def record_value(self, key: str, value) -> None:
        self.values[key] = value

    def to(self, t: torch.Tensor) -> torch.Tensor:
        """A tensor on this rank's device, in the check's dtype if floating point."""
        t = t.to(self.device)
        return t.to(self.dtype) if t.is_floating_point() else t

    def new_group(self, ranks):
        """dist.new_group: every rank must call it, in the same order."""
        return _new_group(ranks)


def _student_frames(exc: BaseException, files: tuple) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    mine = [f for f in frames if f.filename in files]
    if mine:   # as the student knows their files: rtp_course/<exercise>.py, wherever graded
        shown = [traceback.FrameSummary(f"rtp_course/{Path(f.filename).name}", f.lineno, f.name,
                                        line=f.line) for f in mine[-3:]]
        return "".join(traceback.format_list(shown))
    last = frames[-1] if frames else None
    torch_dir = os.path.dirname(torch.__file__) + os.sep
    if last is not None and last.filename.startswith(torch_dir):
        # torch's file by its place in torch, and no source text: nothing of the grader's disk
        return ("(raised inside torch, not in your code; the check called it with what your "
                f"code returned)\n  torch/{last.filename[len(torch_dir):]}, line {last.lineno}, "
                f"in {last.name}\n")
    # raised by the check's own code: its file and text are the grader's, never quoted
    return "(raised by the check, not in your code, on what your code returned)\n"


def syntax_error_outcome(e: SyntaxError) -> dict:
    """A file of the code under test that Python cannot read: its line, not an import's frames."""
    name = Path(e.filename or "?").name
    text = (e.text or "").rstrip("\n")
    caret = ""
    if text and e.offset:
        stripped = text.lstrip()
        caret = "\n    " + " " * max(0, e.offset - 1 - (len(text) - len(stripped))) + "^"
        text = stripped
    where = f'  File "{e.filename}", line {e.lineno}\n    {text}{caret}' if text else ""
    return {"status": "error", "type": type(e).__name__, "phase": "import", "where": where,
            "message": f"{name} does not parse: {e.msg} (line {e.lineno})",
            "hint": "Python cannot read the file, so none of its checks can run: fix that line "
                    "(`python -m py_compile` on the file shows the same error)"}


def raised_by_a_stub(e: BaseException, files: tuple) -> bool:
    """Whether `e` comes from a `raise` statement of the code under test (a stub's TODO), not
    from torch refusing something: a Python frame of torch's (a sparse tensor where a dense
    one goes) or an operator in C++ called from the student's line ("repeat_interleave_cpu"
    not implemented for 'Double'), whose innermost Python frame is the student's own."""
    tb = e.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None or tb.tb_frame.f_code.co_filename not in files:
        return False
    code = tb.tb_frame.f_code
    return any(ins.offset == tb.tb_lasti and ins.opname.startswith("RAISE")
               for ins in dis.get_instructions(code))


def _outcome_of(e: BaseException, files: tuple, phase: str) -> dict:
    """What the report says about an exception (or an exit) raised by the code under test."""
    if isinstance(e, SyntaxError) and str(e.filename or "") in files:
        return syntax_error_outcome(e)
    where = _student_frames(e, files)
    if isinstance(e, NotImplementedError) and raised_by_a_stub(e, files):
        return {"status": "notimpl", "message": str(e) or "not implemented yet", "where": where,
                "phase": phase}
    if isinstance(e, (SystemExit, ExitCalled)):
        call = "os._exit" if isinstance(e, ExitCalled) else "sys.exit"
        code = e.code if isinstance(e, ExitCalled) else e.args[0] if e.args else None
        line = where.strip().splitlines()[0].strip() if where.strip() else "somewhere"
        return {"status": "error", "type": "Exit", "where": where, "phase": phase,
                "message": f"your code called {call}({code!r}) ({line}): code under test must "
                           f"return its result, never end the process"}
    return {"status": "error", "type": type(e).__name__, "message": str(e), "where": where,
            "phase": phase}


def _destroy_groups_since(before: set, wait: bool = True) -> None:
    """Destroy the process groups made since `before` (the check's and the code under test's)
    that torch names by its counter. A group named by its ranks' hash (new_group with
    use_local_synchronization) stays: made again, it would get the same name and meet the
    destroyed one's rendezvous keys in the store. `wait=False`: the groups' last references
    go to a thread that drops them (gloo: see _Dropped)."""
    names = c10d._world.pg_names
    doomed = [pg for pg in c10d._world.pg_map
              if pg not in before and str(names.get(pg, "")).isdigit()]
    for pg in doomed:
        with contextlib.suppress(Exception):     # a group the code under test broke
            dist.destroy_process_group(pg)
    if not wait and doomed:
        _Dropped.put(doomed)


class _Dropped:
    """Freeing a gloo group waits for its transport's event loop to let go of each
    connection (ticks of 10 ms: about 20 ms a group, a check's worth of waiting every few
    checks). The wait holds no GIL, so a daemon thread frees them while the next check runs."""
    _queue: queue.SimpleQueue | None = None

    @classmethod
    def put(cls, group) -> None:
        if cls._queue is None:
            cls._queue = queue.SimpleQueue()
            threading.Thread(target=cls._drop, args=(cls._queue,), daemon=True,
                             name="rtp-course: freeing passed checks' groups").start()
        cls._queue.put(group)

    @staticmethod
    def _drop(groups: queue.SimpleQueue) -> None:
        while True:
            doomed = groups.get()
            time.sleep(0.05)              # the caller's own names for them are gone by then
            doomed.clear()                # the last references: gloo's teardown runs here


def run_checks(rank: int, world_size: int, job: dict) -> str:
    """Worker entry (called by launcher.launch in each rank).

    Order matters: the checks (public and hidden) are loaded and every file the worker
    will write is opened BEFORE grading confines the process; only then does the code
    under test run (its import first)."""
    rundir = Path(job["rundir"])
    channel.connect(own_channel())
    inputs.enter_rank(rank, channel.ask)      # no key here: its own data comes from the parent
    impl_pkg = load_impl(job["impl"])
    refuse_reference_imports()
    files = code_files(impl_pkg)
    commlog.install(code_dirs=files)
    status = Status(rundir / f"status.{rank}.json")
    def on_status(call, family=None, peer=None, collective=None):
        # the last collective stays named after its call ends: a peer's crash may follow it
        last = {"last_collective": collective} if collective is not None else {}
        status.update(call=call, family=family, peer=peer, **last,
                      sent_to=commlog.STATE.sent_to, recv_from=commlog.STATE.recv_from,
                      unwaited_to=commlog.STATE.unwaited_to, dropped_to=commlog.STATE.dropped_to,
                      dropped=commlog.STATE.dropped_works)
    commlog.STATE.on_status = on_status
    meeting = _Meeting(rank, world_size)
    device = rank_device()
    checks = {c.id: c for c in load_checks(job["modules"], side="run")}
    results = {cid: open(rundir / f"result.{cid}.{rank}.pt", "wb") for cid in job["check_ids"]}
    described = "unconfined (rtp-course check runs your code as it is; grading confines it)"
    with open(rundir / f"confinement.{rank}.json", "w") as fh:    # opened before confinement
        if job.get("confine"):
            from rtp_course.confinement import rank as confinement
            described = confinement.confine(rank, job, str(impl_pkg.IMPL_DIR))
        json.dump({"describe": described}, fh)
    global _RANK_PID
    _RANK_PID = os.getpid()
    os._exit = _refuse_exit
    # On CPU, tensors the code under test makes without a device are refused where a GPU run
    # would refuse them (from its import on: `from torch import zeros` gets the watched one),
    # and gloo behaves as NCCL where the two differ (runtime/nccl): one grade on CPU and GPU.
    # RTP_COURSE_EMULATE=nccl watches the checks' own tensors too (the harness's GPU readiness).
    watched = [""] if devices.emulating_nccl() else files
    placement = gpu_placement.host_placement(watched) if device.type == "cpu" \
        else contextlib.nullcontext()
    commlog.STATE.nccl_rules = device.type == "cpu"
    try:
        with placement:
            watch = _watch(job)
            written = _watch_files(job, rundir)
            registry.out_of_sight()     # the hidden checks: out of the module table
            # a memory rule (training/memory.py): the storages the code's import makes, and
            # those its modules hold, count as kept wherever a check begins
            memory = sys.modules.get("rtp_course.training.memory")
            before_import = memory.before_code_import(impl_pkg.__name__) if memory else None
            channel.enter()             # the parent's fact: the code under test runs now
            _import_exercises(checks, job, status)
            if memory is not None:
                memory.after_code_import(before_import)
            for i, cid in enumerate(job["check_ids"]):
                groups_before = set(c10d._world.pg_map)
                outcome = _run_check(checks[cid], i, rank, world_size, device, job, status,
                                     meeting, files, watch)
                if written is not None:
                    outcome = written.checked(results[cid], outcome)
                _write_whole(results[cid], outcome_file.dumps(outcome))
                results[cid].close()
                status.update(phase=DONE, family=None, harness=True,
                              call="waiting for the other ranks to finish this check")
                if not meeting.after_check(outcome["status"] == "ok"):
                    _exit(3)                 # peers are stuck inside a call this rank abandoned
                if device.type == "cuda" and not _all_ok(meeting, outcome):
                    _exit(3)                 # a fresh launch for the rest: no CUDA error or
                    #                          communicator of a failed check reaches them
                if device.type == "cpu" and _all_ok(meeting, outcome, GRACE_AFTER_FAILURE):
                    # gloo keeps two threads a rank for each group: a run of every check
                    # would hold thousands (EAGAIN). A failed check's groups stay: a peer
                    # may be stuck in them.
                    _destroy_groups_since(groups_before, wait=False)
    finally:
        os._exit = _exit
    return "done"


def _watch(job: dict):
    """Grading watches the harness for tampering (confinement/integrity.py); a plain check
    does not."""
    if not job.get("confine"):
        return None
    from rtp_course.confinement import integrity
    return integrity.Watch()


def _watch_files(job: dict, rundir: Path):
    """Grading watches the outcome files for writes not the worker's
    (confinement/result_files.py); a plain check does not."""
    if not job.get("confine"):
        return None
    from rtp_course.confinement import result_files
    return result_files.Watch(rundir)


def _write_whole(fh, data: bytes) -> None:
    """The outcome at the start of its file, in one write (a reader sees it whole or empty),
    wherever the file's offset was left."""
    os.pwrite(fh.fileno(), data, 0)
    os.ftruncate(fh.fileno(), len(data))


def _import_exercises(checks: dict, job: dict, status: Status) -> None:
    for ex in dict.fromkeys(checks[cid].exercise for cid in job["check_ids"]):
        status.update(check=f"import:{ex}", phase="import", call=None)
        try:
            exercise(ex)
        except BaseException:  # noqa: BLE001  (reported by the first check that uses it)
            _end_if_forked()


def _run_check(check, i: int, rank: int, world_size: int, device, job: dict, status: Status,
               meeting: _Meeting, files: tuple, watch=None) -> dict:
    """One check on this rank: its outcome, as the parent will read it."""
    meeting.start(i)
    inputs.enter_check(check.id, i)       # its own data differs from check to check
    # harness: the checker's own steps (the check's group, the watch), no code under test
    status.update(check=check.id, index=i, phase="setup", call=None, family=None,
                  sent_to={}, recv_from={}, unwaited_to={}, dropped_to={}, dropped=[],
                  last_collective=None, harness=True)
    groups_before = set(c10d._world.pg_map)
    group = _new_group(list(range(world_size)))
    dtype = getattr(torch, job.get("dtype") or check.dtype)
    ctx = Ctx(rank, world_size, group, device, dtype, status, meeting)
    commlog.reset()
    if watch is not None:
        watch.begin()
    manual_seed(1234 + rank)   # code under test drawing random numbers stays repeatable
    status.update(harness=False)
    outcome = {"status": "ok"}
    try:
        check.run(ctx)
        if device.type == "cuda":
            torch.cuda.synchronize()     # an asynchronous CUDA error belongs to this check
    except BaseException as e:  # the student's exception or exit, its rank and line
        _end_if_forked()
        outcome = _outcome_of(e, files, ctx.failed_phase or "setup")
    outcome.update(records=ctx.records, values=ctx.values,
                   events=[vars(e) for e in commlog.events()], program=commlog.program(),
                   peak_recv=dict(commlog.STATE.peak_recv))
    if watch is not None:
        outcome = watch.end(outcome)
    if device.type == "cuda" and outcome["status"] == "ok":
        _destroy_groups_since(groups_before)   # NCCL: free the communicators' GPU buffers
    return outcome


def _all_ok(meeting: _Meeting, outcome: dict, within: float | None = None) -> bool:
    """Whether every rank's check ran without an error (called once all are past it);
    False if some rank did not say so `within` seconds."""
    meeting.store.set(f"ok/{meeting.check}/{meeting.rank}",
                      "1" if outcome["status"] == "ok" else "0")
    keys = [f"ok/{meeting.check}/{r}" for r in range(meeting.world_size)]
    if within is not None:
        try:
            meeting.store.wait(keys, datetime.timedelta(seconds=within))
        except Exception:  # noqa: BLE001 - a peer that left: keep what it may be stuck in
            return False
    return all(meeting.store.get(k) == b"1" for k in keys)
