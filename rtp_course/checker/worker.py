"""The worker side of the checker: runs checks on one rank, with the code under test.

Each check gets a fresh process group (so one check's mismatched collectives
cannot poison the next), and its observations are saved to a file per rank
as soon as it ends, so the parent can judge whatever finished even if a later
check deadlocks. After each check the ranks meet (not on a collective: through
the relay's own synchronisation on CPU, the launch's TCP store on NCCL): if a
rank failed and its peers do not arrive, it exits, and the parent relaunches the
remaining checks.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import os
import tempfile
import time
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

import rtp_course
from rtp_course.checker import inputs, outcome_file
from rtp_course.checker.common import manual_seed
from rtp_course.checker.registry import load_checks
from rtp_course.course.impl import code_files, exercise, load_impl, refuse_reference_imports
from rtp_course.runtime import commlog, devices, forkserver, gpu_placement, netns, sandbox, scratch
from rtp_course.runtime.launcher import rank_device
from rtp_course.runtime.relay import group as relay_group

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
    """The rank's current check, phase and call, for the parent's watchdog.

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
    """How a launch's ranks meet without a collective: the relay's synchronisation on CPU
    (runtime/relay: no data crosses it), the launch's TCP store on NCCL. Between checks,
    and for a check that orders its ranks (ctx.flag / ctx.wait_flags / ctx.first_other)."""

    def __init__(self, rank: int, world_size: int):
        self.rank, self.world_size = rank, world_size
        self.relayed = relay_group._LINK is not None
        self.store = None if self.relayed else c10d._get_default_store()
        self.check = 0

    def start(self, i: int, phase: str = "setup") -> None:
        self.check = i
        self.phase(phase)

    def phase(self, name: str) -> None:
        if self.relayed:
            relay_group.mark(self.check, name)

    def after_check(self, ok: bool) -> bool:
        """Every rank is done with the check (False: a peer did not come within the grace a
        failed check gives it)."""
        wait = GRACE_AFTER_FAILURE if not ok else 24 * 3600
        if self.relayed:
            try:
                return relay_group.sync(f"done {self.check}", wait)
            except relay_group.RelayError:
                return False
        self.store.set(f"done/{self.check}/{self.rank}", "1")
        try:
            self.store.wait([f"done/{self.check}/{r}" for r in range(self.world_size)],
                            datetime.timedelta(seconds=wait))
            return True
        except Exception:  # noqa: BLE001 - peers are stuck inside a call this rank abandoned
            return False

    def flag(self) -> None:
        if self.relayed:
            relay_group.flag()
        else:
            self.store.set(f"check{self.check}/flag/{self.rank}", "1")

    def wait_flags(self, ranks, seconds: float) -> bool:
        if self.relayed:
            return relay_group.wait_flags(ranks, seconds)
        try:
            self.store.wait([f"check{self.check}/flag/{r}" for r in ranks],
                            datetime.timedelta(seconds=seconds))
            return True
        except Exception:  # noqa: BLE001 - a timeout
            return False

    def first_other(self, text: str):
        if self.relayed:
            return relay_group.first_other(f"same {self.check}", text)
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
        self._meeting.phase(name)
        self._status.update(phase=name)
        try:
            yield
        except BaseException:
            self.failed_phase = name
            raise
        finally:
            commlog.set_phase("between phases")
            self._meeting.phase("between phases")

    # A check that orders its ranks (no data crosses: only that a rank got somewhere)
    def flag(self) -> None:
        """This rank has reached the check's flag point."""
        self._meeting.flag()

    def wait_flags(self, ranks, seconds: float) -> bool:
        """Whether every rank of `ranks` reached its flag point within `seconds`."""
        return self._meeting.wait_flags(ranks, seconds)

    def first_other(self, text: str):
        """The first rank whose `text` differs from this rank's (None: every rank's is the
        same); the other ranks' texts are never seen here."""
        return self._meeting.first_other(text)

    def record(self, key: str, tensor) -> None:
        if tensor is None:
            self.records[key] = None
        else:  # a plain tensor even if the code under test returned a host tensor
            with torch._C.DisableTorchFunctionSubclass():   # a GPU run copies it to the host
                t = tensor.detach().to("cpu", copy=True)
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
    if mine:
        return "".join(traceback.format_list(mine[-3:]))
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


def _outcome_of(e: BaseException, files: tuple, phase: str) -> dict:
    """What the report says about an exception (or an exit) raised by the code under test."""
    if isinstance(e, SyntaxError) and str(e.filename or "") in files:
        return syntax_error_outcome(e)
    where = _student_frames(e, files)
    frames = traceback.extract_tb(e.__traceback__)
    if isinstance(e, NotImplementedError) and frames and frames[-1].filename in files:
        # raised by a stub (the exercise's own `raise NotImplementedError`), not by torch
        # refusing something (a sparse tensor where a dense one goes): that is an error
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


def _confine(rank: int, rundir: Path, job: dict, impl_dir: str) -> sandbox.Confinement:
    if not job.get("confine", True):
        return sandbox.Confinement(False, 0, "disabled (RTP_COURSE_CONFINE=0)")
    private = Path(tempfile.gettempdir())       # the launcher made it: rundir/tmp.<rank>.<secret>
    os.environ["HOME"] = os.environ["MPLCONFIGDIR"] = str(private)
    gpu = job["backend"] == "nccl"
    # NCCL's shared-memory transport creates its segments in /dev/shm; gloo needs none of it.
    write = [str(private)] + (["/dev/shm"] if gpu else [])
    package = Path(rtp_course.__file__).resolve().parent
    # The checks' own files were loaded before this: the code under test cannot load them again
    # (a class loaded afresh would have its parent side back). The hidden checks and the
    # reference (unless it is the code under test) are outside what is granted, unless the
    # course sits under a system dir: closed then too.
    closed = [package / "checker" / "public",
              *(d for d in _instructor_dirs() if d.resolve() != Path(impl_dir).resolve())]
    return sandbox.confine(read=[str(package), impl_dir], write=write,
                           devices=sandbox.gpu_devices() if gpu else (), unreadable=closed,
                           other_processes=gpu, rendezvous=relay_group._LINK is None,
                           tcp=relay_group._LINK is None, channels=relay_group._LINK is None)


def _instructor_dirs() -> list:
    from rtp_course.checker.registry import hidden_dir
    try:
        from rtp_course.instructor import solutions_dir
    except ImportError:             # the student edition
        solutions_dir = lambda: None  # noqa: E731
    return [d for d in (hidden_dir(), solutions_dir()) if d is not None]


FILE_CAP_MB = 512     # no file a rank writes (its results, its stderr, its own) grows past this
DISK_CAP_MB = 512     # what a rank's files hold in all: a relay rank's tmpfs; the watchdog's sum
MEMORY_CAP_MB = 4096  # a CPU rank's memory (its heap and anonymous mappings); checks use ~0.5 GB
TASK_CAP = 512        # a relay rank's processes and threads (a rank runs about ten)
MAPPED_SLACK_MB = 2048  # address space beyond the memory cap: libraries, stacks, malloc's arenas
FILES_CAP = 4096      # a relay rank's open descriptors (a rank holds about twenty)


def _cap_resources(job: dict) -> None:
    """Hard limits, set before the code under test runs (it cannot raise them again), named in
    the report when reached (exception_causes, launcher.died_how).

    RLIMIT_FSIZE: a write past the file cap fails ("File too large"), or kills with SIGXFSZ.
    RLIMIT_DATA (CPU ranks): an allocation past the memory cap fails in torch's allocator
    ("can't allocate memory"), so one rank cannot take the machine's memory. RLIMIT_DATA
    counts private mappings only: RLIMIT_AS, MAPPED_SLACK_MB above it, caps shared ones
    (`mmap.mmap(-1, size)`), the rest of the address space an honest rank uses (about 0.8 GB
    in all). Not on a GPU rank: the CUDA driver maps host memory of its own, whose size the
    course does not own. (Memory no mapping holds, a relay rank cannot make: runtime/seccomp
    refuses memfd_create and shmget, and RLIMIT_NOFILE caps its pipes' buffers.)
    A relay rank's private directory is a tmpfs of DISK_CAP_MB (runtime/scratch.py): past
    it, "No space left on device". RLIMIT_NPROC (relay ranks, whose count is of their own
    user namespace's tasks): a fork bomb stops at TASK_CAP; the kernel exempts root, whose
    rank its PID namespace and cgroup end at once."""
    import resource
    if netns.MADE[0] & netns.CLONE_NEWNS:     # only in a mount namespace of its own
        scratch.mount_private(tempfile.gettempdir(),
                              int(job.get("disk_cap_mb") or DISK_CAP_MB))
    caps = [(resource.RLIMIT_FSIZE, int(job.get("file_cap_mb") or FILE_CAP_MB))]
    if job.get("backend") != "nccl":
        memory = int(job.get("memory_cap_mb") or MEMORY_CAP_MB)
        caps += [(resource.RLIMIT_DATA, memory), (resource.RLIMIT_AS, memory + MAPPED_SLACK_MB)]
    # no core file: a crash would write one where the rank's sandbox lets it write nothing
    # (the kernel writes it, or hands it to the machine's collector)
    limits = [(which, mb << 20) for which, mb in caps] + [(resource.RLIMIT_CORE, 0)]
    if netns.MADE[0]:
        limits += [(resource.RLIMIT_NPROC, TASK_CAP), (resource.RLIMIT_NOFILE, FILES_CAP)]
    for which, value in limits:
        try:
            resource.setrlimit(which, (value, value))
        except (ValueError, OSError):
            pass


def _destroy_groups_since(before: set) -> None:
    """Destroy every process group made since `before` (the check's and the code under test's)."""
    for pg in [pg for pg in c10d._world.pg_map if pg not in before]:
        with contextlib.suppress(Exception):     # a group the code under test broke
            dist.destroy_process_group(pg)


def run_checks(rank: int, world_size: int, job: dict) -> str:
    """Worker entry (called by launcher.launch in each rank).

    Order matters: the checks (public and hidden) are loaded and every file the worker
    will write is opened BEFORE the process confines itself; only then does the code
    under test run (its import first, under a time limit of its own)."""
    rundir = Path(job["rundir"])
    if relay_group._LINK is not None:     # no key here: its own data comes from the parent
        inputs.enter_relay_rank(rank, relay_group.ask_input)
    else:
        inputs.enter_rank(rank, rundir)   # this rank's own data key, and no other rank's
    impl_pkg = load_impl(job["impl"])
    refuse_reference_imports()
    code_dir, files = str(impl_pkg.IMPL_DIR), code_files(impl_pkg)
    commlog.install(code_dirs=files)
    status = Status(rundir / f"status.{rank}.json")
    commlog.STATE.on_status = lambda call, family=None, peer=None: status.update(
        call=call, family=family, peer=peer, sent_to=commlog.STATE.sent_to,
        recv_from=commlog.STATE.recv_from, unwaited_to=commlog.STATE.unwaited_to)
    meeting = _Meeting(rank, world_size)
    device = rank_device()
    checks = {c.id: c for c in load_checks(job["modules"], side="run")}
    results = {cid: open(rundir / f"result.{cid}.{rank}.pt", "wb") for cid in job["check_ids"]}
    # What the code under test may see of the environment: the rank environment (the
    # forkserver's, with nothing of the grader's) and the course's own run settings.
    for key in [k for k in os.environ if k not in forkserver.rank_environment(os.environ)
                and k not in ("RTP_COURSE_EMULATE", "RTP_COURSE_IMPL", "MPLCONFIGDIR")]:
        del os.environ[key]
    _cap_resources(job)
    with open(rundir / f"confinement.{rank}.json", "w") as fh:
        confinement = _confine(rank, rundir, job, code_dir)
        json.dump({"active": confinement.active, "describe": confinement.describe()}, fh)
    global _RANK_PID
    _RANK_PID = os.getpid()
    os._exit = _refuse_exit
    # On CPU, tensors the code under test makes without a device are refused where a GPU run
    # would refuse them (from its import on: `from torch import zeros` gets the watched one).
    # RTP_COURSE_EMULATE=nccl watches the checks' own tensors too (the harness's GPU readiness).
    watched = [""] if devices.emulating_nccl() else files
    placement = gpu_placement.host_placement(watched) if device.type == "cpu" \
        else contextlib.nullcontext()
    # and gloo behaves as NCCL where a grade depends on it (one coalesced batch handle,
    # contiguous tensors only, ReduceOp.AVG): one grade on CPU and GPU
    commlog.STATE.nccl_rules = device.type == "cpu"
    try:
        with placement:
            for ex in dict.fromkeys(checks[cid].exercise for cid in job["check_ids"]):
                status.update(check=f"import:{ex}", phase="import", call=None,
                              started=time.time())
                try:
                    exercise(ex)
                except BaseException:  # noqa: BLE001  (reported by the first check that uses it)
                    _end_if_forked()
            for i, cid in enumerate(job["check_ids"]):
                check = checks[cid]
                meeting.start(i)
                inputs.enter_check(cid)      # its own data differs from check to check
                status.update(check=cid, index=i, phase="setup", call=None, started=time.time(),
                              sent_to={}, recv_from={}, unwaited_to={})
                groups_before = set(c10d._world.pg_map)
                group = _new_group(list(range(world_size)))
                dtype = getattr(torch, job.get("dtype") or check.dtype)
                ctx = Ctx(rank, world_size, group, device, dtype, status, meeting)
                commlog.reset()
                manual_seed(1234 + rank)  # code under test drawing random numbers stays repeatable
                outcome = {"status": "ok"}
                try:
                    check.run(ctx)
                except BaseException as e:  # the student's exception or exit, its rank and line
                    _end_if_forked()
                    outcome = _outcome_of(e, files, ctx.failed_phase or "setup")
                outcome.update(records=ctx.records, values=ctx.values,
                               events=[vars(e) for e in commlog.events()],
                               peak_recv=dict(commlog.STATE.peak_recv))
                # one write: the parent reads it whole or empty
                results[cid].write(outcome_file.dumps(outcome))
                results[cid].close()
                status.update(phase="done", call="waiting for the other ranks to finish this check")
                meeting.phase("done")
                if not meeting.after_check(outcome["status"] == "ok"):
                    _exit(3)                 # peers are stuck inside a call this rank abandoned
                # NCCL: free the communicators' GPU buffers (the check's and the code's own).
                # Not after a failed check: destroying a group with an unmatched operation in
                # flight hangs; the relaunch's exit frees them. Gloo: ~10 ms a rank per check
                # for nothing, the exit frees them.
                if job["backend"] == "nccl" and outcome["status"] == "ok":
                    _destroy_groups_since(groups_before)
    finally:
        os._exit = _exit
    return "done"
