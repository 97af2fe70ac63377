"""What the ranks report and what judging decides, as types: the parent's only reading of
a rank's word.

A rank writes two things the parent reads (the worker's side, checker/worker.py): its
status file, rewritten at every call (`Status.update`), and an outcome file per check
(`outcome_file.dumps`). Both come from a process that ran the code under test, so they are
parsed here, once, into `RankStatus` and `Outcome`: a field of the wrong type, or one
missing, becomes its empty value (None, "", {}, ()), never an exception later in the
judging. Everything after this boundary (watchdog, judging, verdict, diagnosis) reads
attributes, not string keys.

What judging decides: a `Result` per check and world size, whose `status` is a `Verdict`;
the watchdog's reason to stop a group is a `StopReason`; its place before the first check
is a `Place`. The enums are `str`/`int` enums: their values are the words the JSON report,
nbgrader's files and the text report print ("passed", "deadlock", ...), and they compare
equal to those words.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from pathlib import Path

from rtp_course.checker.outcome_file import read_json_bounded


class Verdict(enum.StrEnum):
    """A check's verdict at one world size (`Result.status`), as reports print it."""
    PASSED = "passed"
    FAILED = "failed"
    NOTIMPL = "notimpl"        # the stub's own NotImplementedError
    ERROR = "error"
    DEADLOCK = "deadlock"
    BUSY = "busy"              # the machine was too busy to finish it: not graded
    NOTRUN = "notrun"          # what other checks spent left it no budget: not graded


# Not graded, never failed: the machine was too busy to finish the check ("busy"), or what other
# checks spent left it no budget ("notrun"); run again, they are graded then.
NOT_GRADED = (Verdict.BUSY, Verdict.NOTRUN)


class OutcomeStatus(enum.StrEnum):
    """How a check ended on one rank (`Outcome.status`)."""
    OK = "ok"
    NOTIMPL = "notimpl"
    ERROR = "error"


class StopReason(enum.StrEnum):
    """Why the watchdog stopped a group (`watchdog.Stuck.reason`)."""
    HANG = "hang"              # every rank blocked: the check's verdict is a deadlock
    OWN = "own"                # past the check's own CPU budget: too slow
    SLOW = "slow"              # past the wall-clock backstop without being starved: too slow
    IMPORT = "import"          # importing the code under test used too much CPU
    EXERCISE = "exercise"      # the exercise's shared budget, spent by other checks: not run
    RUN = "run"                # the run's shared budget, likewise
    BUSY = "busy"              # the machine, not the code: not graded
    DISK = "disk"              # a rank wrote more than its disk cap


TOO_SLOW = (StopReason.OWN, StopReason.SLOW, StopReason.IMPORT)     # the check's own doing
SHARED = (StopReason.EXERCISE, StopReason.RUN)                      # what other checks spent


class Place(enum.IntEnum):
    """The watch's place before the first check (from 0 on, the index of the check some rank
    is still in)."""
    STARTING = -2              # the ranks are starting: no status file yet from every rank
    IMPORTING = -1             # every rank wrote its status: importing the code under test


DONE = "done"                  # the phase a rank's status names once it finished its check


# --- the rank's word, parsed -----------------------------------------------------------------

def _text(v) -> str | None:
    return v if isinstance(v, str) else None


def _int(v) -> int | None:
    return v if type(v) is int else None          # a bool is no rank and no index


def _list(v) -> list:
    return v if isinstance(v, list) else []


def _counts(v) -> dict[str, int]:
    """{peer rank as text: count} (the status's sent_to, recv_from, ...)."""
    if not isinstance(v, dict):
        return {}
    return {k: n for k, n in v.items() if isinstance(k, str) and type(n) is int}


@dataclass(frozen=True)
class RankStatus:
    """A rank's status file (worker.Status): the check, phase and call it is in, and what it
    posted to each peer in this check. An unreadable file (half written, or junk) is
    `RankStatus()`: no check, no call."""
    check: str | None = None              # a check id, or "import:<exercise>"
    index: int | None = None              # the check's place in the launch's list
    phase: str | None = None              # the check's phase, DONE after the check
    call: str | None = None               # the communication call (or wait) it is blocked in
    family: str | None = None             # that call's family ("isend", "all_reduce", "harness")
    peer: int | None = None               # that call's peer rank, if point-to-point
    harness: bool = False                 # in the checker's own steps around a check
    hint_key: str | None = None           # the check's hint for its own wait (ctx.wait_flags)
    sent_to: dict = field(default_factory=dict)      # {peer: sends posted} in this check
    recv_from: dict = field(default_factory=dict)    # {peer: receives posted}
    unwaited_to: dict = field(default_factory=dict)  # {peer: sends not waited yet}
    dropped_to: dict = field(default_factory=dict)   # {peer: sends let go of unwaited}
    dropped: tuple = ()                   # the works it let go of unwaited, described
    last_collective: dict | None = None   # the last collective it called (commlog's event)
    known: bool = False                   # the file held a status record

    @classmethod
    def parse(cls, raw) -> RankStatus:
        """The status a rank wrote (the JSON object, or None when it could not be read)."""
        if not isinstance(raw, dict):
            return cls()
        last = raw.get("last_collective")
        return cls(check=_text(raw.get("check")), index=_int(raw.get("index")),
                   phase=_text(raw.get("phase")), call=_text(raw.get("call")),
                   family=_text(raw.get("family")), peer=_int(raw.get("peer")),
                   harness=raw.get("harness") is True, hint_key=_text(raw.get("hint_key")),
                   sent_to=_counts(raw.get("sent_to")), recv_from=_counts(raw.get("recv_from")),
                   unwaited_to=_counts(raw.get("unwaited_to")),
                   dropped_to=_counts(raw.get("dropped_to")),
                   dropped=tuple(d for d in _list(raw.get("dropped")) if isinstance(d, str)),
                   last_collective=last if isinstance(last, dict) else None, known=True)

    @classmethod
    def read(cls, path: Path) -> RankStatus:
        """The status file at `path`, read bounded (outcome_file.read_json_bounded)."""
        return cls.parse(read_json_bounded(path))

    @property
    def done(self) -> bool:
        """It finished its check and waits for the others."""
        return self.phase == DONE

    def count(self, what: str, peer: int) -> int:
        """How many sends (what="sent_to"), receives ("recv_from"), ... it posted to `peer`."""
        return getattr(self, what).get(str(peer), 0)


def read_statuses(rundir: Path, world_size: int) -> dict[int, RankStatus]:
    """{rank: its status} of a launch's ranks."""
    return {r: RankStatus.read(Path(rundir) / f"status.{r}.json") for r in range(world_size)}


@dataclass
class Outcome:
    """One rank's outcome of one check (what worker._run_check returns and outcome_file
    carries): how it ended, and what it recorded and communicated."""
    status: OutcomeStatus
    type: str = ""                         # the exception's type ("MalformedResult": a bad file)
    message: str = ""
    where: str = ""                        # the frames of the code under test
    phase: str = ""                        # the phase it raised in
    hint: str = ""                         # the rank's own hint (a syntax error's)
    records: dict = field(default_factory=dict)    # {key: tensor or None} (ctx.record)
    values: dict = field(default_factory=dict)     # {key: value} (ctx.record_value)
    events: list = field(default_factory=list)     # commlog's events, flat {name: scalar}
    program: dict | None = None                    # commlog's program (nccl/order.py)
    peak_recv: dict = field(default_factory=dict)  # {phase: bytes held in receives at once}

    @classmethod
    def parse(cls, raw) -> Outcome:
        """The outcome a rank wrote; ValueError if it is no outcome record (no known status).
        Text fields that are not text are empty; so are records, values and events of the
        wrong kind."""
        if not isinstance(raw, dict) or raw.get("status") not in tuple(OutcomeStatus):
            raise ValueError("not an outcome record")
        text = {k: raw[k] if isinstance(raw.get(k), str) else ""
                for k in ("type", "message", "where", "phase", "hint")}
        as_dict = lambda k: raw[k] if isinstance(raw.get(k), dict) else {}  # noqa: E731
        program = raw.get("program")
        return cls(status=OutcomeStatus(raw["status"]), **text, records=as_dict("records"),
                   values=as_dict("values"), peak_recv=as_dict("peak_recv"),
                   events=[e for e in _list(raw.get("events")) if isinstance(e, dict)],
                   program=program if isinstance(program, dict) else None)

    @classmethod
    def malformed(cls, rank: int, why: str) -> Outcome:
        """What the verdict reads for a result file that is not one: an error, not graded
        as anything the rank did."""
        return cls(OutcomeStatus.ERROR, type="MalformedResult",
                   message=f"rank {rank}'s result file is not a result the checker can judge "
                           f"({why}); it is not graded")

    @property
    def ok(self) -> bool:
        return self.status == OutcomeStatus.OK


# --- what judging decides ----------------------------------------------------------------------

@dataclass
class Result:
    """One check on one world size."""
    exercise: str
    check: str
    world_size: int
    status: Verdict
    message: str = ""
    phase: str = ""
    rank: int | None = None
    key: str = ""
    hint: str = ""
    details: dict = field(default_factory=dict)
    task: str = ""              # the course task the check belongs to, "E2.1"

    def __setattr__(self, name, value):
        # a status set by its word ("busy") is the Verdict it names; another word is refused
        super().__setattr__(name, Verdict(value) if name == "status" else value)

    @property
    def passed(self) -> bool:
        return self.status == Verdict.PASSED

    @property
    def not_run_after(self) -> int | None:
        """The smaller world size this check hung at, where this size was skipped for it."""
        return self.details.get("not_run_after")

    @property
    def never_returned(self) -> bool:
        """It hung, or spun past its own CPU budget: the function it called did not return."""
        return self.status == Verdict.DEADLOCK or \
            self.details.get("stopped") in (StopReason.OWN, StopReason.SLOW)

    @property
    def spent_budgets(self) -> bool:
        """It never returned, or its ranks waited without computing (a sleep, a poll loop)
        long enough to spend its exercise's hang budget (checker/budgets.py)."""
        return self.never_returned or "waited" in self.details

    @property
    def not_graded(self) -> bool:
        return self.status in NOT_GRADED
