"""One submitted Slurm job: its state, queue position, log, report, and a readable summary.

State comes from `scontrol show job` (pending, running, and finished jobs for
MinJobAge seconds), then from `sacct` once the controller has forgotten the job.
We poll rather than use `sbatch --wait`, which checks back only every 2, 8, 32 s.
"""
import json
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

PENDING, RUNNING, COMPLETED = "PENDING", "RUNNING", "COMPLETED"
FAILED, TIMEOUT, CANCELLED = "FAILED", "TIMEOUT", "CANCELLED"
FINAL_STATES = (COMPLETED, FAILED, TIMEOUT, CANCELLED)
# Slurm's many job states, folded onto the six a student needs to know.
_STATE_OF = {
    "PENDING": PENDING, "CONFIGURING": PENDING, "REQUEUED": PENDING, "REQUEUE_HOLD": PENDING,
    "REQUEUE_FED": PENDING, "RESV_DEL_HOLD": PENDING, "SUSPENDED": PENDING, "STOPPED": PENDING,
    "RUNNING": RUNNING, "COMPLETING": RUNNING, "SIGNALING": RUNNING, "STAGE_OUT": RUNNING,
    "RESIZING": RUNNING, "COMPLETED": COMPLETED, "TIMEOUT": TIMEOUT, "DEADLINE": TIMEOUT,
    "CANCELLED": CANCELLED, "PREEMPTED": CANCELLED, "REVOKED": CANCELLED,
    "FAILED": FAILED, "NODE_FAIL": FAILED, "BOOT_FAIL": FAILED, "OUT_OF_MEMORY": FAILED,
    "SPECIAL_EXIT": FAILED,
}
# sacct's column names -> scontrol's, so the rest of the code reads one kind of record.
_SACCT_FIELDS = {"JobName": "JobName", "State": "JobState", "ExitCode": "ExitCode",
                 "Timelimit": "TimeLimit", "Elapsed": "RunTime", "NodeList": "NodeList",
                 "Partition": "Partition", "Reason": "Reason"}


class SlurmError(RuntimeError):
    """A Slurm command failed; the message carries its stderr."""


class SlurmNotFound(SlurmError):
    """No usable Slurm here; the message says how to do the same thing locally."""


def normalize_state(raw):
    """'CANCELLED by 0', 'CANCELLED+', 'OUT_OF_MEMORY', 'COMPLETING' -> one of the six states."""
    words = (raw or "").split()
    if not words:
        return PENDING
    return _STATE_OF.get(words[0].rstrip("+").upper(), FAILED)


def run_slurm_command(*cmd, timeout=30, check=True):
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError as e:
        raise SlurmNotFound(f"Slurm was not found: no `{cmd[0]}` command on PATH") from e
    except subprocess.TimeoutExpired as e:
        raise SlurmError(f"`{shlex.join(cmd)}` did not answer in {timeout} s") from e
    if check and r.returncode != 0:
        raise SlurmError(f"`{shlex.join(cmd)}` failed: {(r.stderr or r.stdout).strip()}")
    return r


def format_report(rep):
    """The checker's JSON report as text: a verdict per exercise, a diagnosis per failing check."""
    lines = [f"checker: {'PASSED' if rep.get('passed') else 'FAILED'}"
             + (f" ({rep['summary']})" if rep.get("summary") else "")]
    for name, ex in rep.get("exercises", {}).items():
        by_check = {}
        for c in ex.get("checks", []):
            by_check.setdefault(c.get("name"), []).append(c)
        ok = sum(all(c.get("passed") for c in cs) for cs in by_check.values())
        lines.append(f"  {name}: {'passed' if ex.get('passed') else 'FAILED'} ({ok}/{len(by_check)} checks)")
        for check, cs in by_check.items():
            bad = [c for c in cs if not c.get("passed")]
            if not bad:
                continue
            # one diagnosis per check (the others are usually the same bug): the most telling
            # (as checker.report.lead, which this module, run without torch, cannot import)
            first = max(bad, key=lambda c: (c.get("status") == "notimpl",
                                            {"failed": 2, "error": 2, "deadlock": 1}.get(
                                                c.get("status"), 0),
                                            c.get("not_run_after") is None,
                                            (c.get("world_size") or 0) > 1,
                                            c.get("world_size") or 0))
            where = ", ".join(f"{k} {first[k]}" for k in ("phase", "rank") if first.get(k) not in (None, ""))
            sizes = ",".join(str(c.get("world_size")) for c in bad)
            lines.append(f"    x {check} (fails at world size {sizes}; "
                         f"world size {first.get('world_size')}{', ' + where if where else ''}):")
            lines += ["      " + line for line in str(first.get("message", "")).splitlines()]
            if first.get("hint"):
                lines.append(f"      hint: {first['hint']}")
    return "\n".join(lines)


def _ordinal(n):
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


class _Progress:
    """One live status line: an updating display in a notebook, `\\r` on a terminal,
    else (a log file) a new line only when the state changes."""

    def __init__(self):
        self.handle, self.last, self.last_key = None, "", None
        try:
            from IPython import get_ipython
            from IPython.display import Pretty, display
            if type(get_ipython()).__name__ == "ZMQInteractiveShell":
                self.pretty = Pretty
                self.handle = display(Pretty(""), display_id=True)
        except ImportError:
            pass
        self.tty = self.handle is None and sys.stderr.isatty()

    def show(self, key, line):
        if self.handle is not None:
            self.handle.update(self.pretty(line))
        elif self.tty:
            sys.stderr.write("\r" + line.ljust(len(self.last)))
            sys.stderr.flush()
        elif key != self.last_key:
            print(line, file=sys.stderr, flush=True)
        self.last, self.last_key = line, key

    def close(self):
        if self.tty and self.last:
            sys.stderr.write("\n")


class Job:
    """A Slurm job of ours. `log`, `report_path`, `bench_dir`: where the job writes."""

    def __init__(self, job_id, log=None, report_path=None, bench_dir=None):
        self.job_id = str(job_id)
        self.log = Path(log) if log else None
        self.report_path = Path(report_path) if report_path else None
        self.bench_dir = Path(bench_dir) if bench_dir else None
        self._final = None  # the record of a finished job: it no longer changes

    @classmethod
    def attach(cls, job_id):
        """A Job for an id (e.g. from a shell sbatch); log and report found from the job's StdOut."""
        job = cls(job_id)
        out = job.info().get("StdOut")
        if out:
            job.log = Path(out)
            if job.log.suffix == ".out" and job.log.name.startswith("rtp-check-"):
                job.report_path = job.log.with_suffix(".json")
        return job

    def __repr__(self):
        return f"<Slurm job {self.job_id}: {self.state()}>"

    def info(self):
        """Slurm's record of the job as a dict (scontrol's keys: JobState, ExitCode, Reason...)."""
        if self._final is not None:
            return self._final
        r = run_slurm_command("scontrol", "show", "job", "-o", self.job_id, check=False)
        if r.returncode == 0 and r.stdout.strip():
            rec = dict(re.findall(r"(\S+?)=(\S*)", r.stdout))
        else:
            rec = self._sacct() or {}
            if not rec:
                raise SlurmError(f"Slurm does not know job {self.job_id}: {r.stderr.strip()} "
                                 "(finished long ago on a cluster without accounting?)")
        if normalize_state(rec.get("JobState")) in FINAL_STATES:
            self._final = rec
        return rec

    def _sacct(self):
        fields = list(_SACCT_FIELDS)
        r = run_slurm_command("sacct", "-X", "-n", "-P", "-j", self.job_id,
                              "-o", ",".join(fields), check=False)
        rows = [line.split("|") for line in r.stdout.splitlines() if line.strip()]
        if r.returncode != 0 or not rows:
            return None
        return {_SACCT_FIELDS[f]: v for f, v in zip(fields, rows[-1])}

    def state(self):
        """PENDING, RUNNING, COMPLETED, FAILED, TIMEOUT or CANCELLED."""
        return normalize_state(self.info().get("JobState"))

    def queue_position(self):
        """1 for the next pending job to start in this job's partition; None unless pending."""
        rec = self.info()
        if normalize_state(rec.get("JobState")) != PENDING:
            return None
        part = rec.get("Partition")
        r = run_slurm_command("squeue", "-h", "-t", "PENDING", "--sort=-p,V,i", "-o", "%i",
                              *(["-p", part] if part and part != "(null)" else []), check=False)
        ids = r.stdout.split()
        return ids.index(self.job_id) + 1 if self.job_id in ids else None

    def _status(self, rec):
        state = normalize_state(rec.get("JobState"))
        line = f"Slurm job {self.job_id} ({rec.get('JobName', '?')}): {state}"
        if state == PENDING:
            pos = self.queue_position()
            line += f", {_ordinal(pos)} in the queue" if pos else ""
            reason = rec.get("Reason", "None")
            line += f" (reason: {reason})" if reason not in ("None", "") else ""
        elif state == RUNNING:
            line += f", running for {rec.get('RunTime', '?')} on {rec.get('NodeList', '?')}"
        return state, line

    def wait(self, poll=0.5, timeout=None, progress=True):
        """Poll until the job ends (or `timeout` s pass); return its state.

        The interval grows from `poll` to 5 s while nothing changes, to spare the controller."""
        show = _Progress() if progress else None
        start, delay, last, errors = time.monotonic(), poll, None, 0
        try:
            while True:
                try:
                    state, line = self._status(self.info())
                    errors = 0
                except SlurmError:
                    errors += 1  # a busy controller times out now and then; give up on a streak
                    if errors > 5:
                        raise
                    time.sleep(delay)
                    continue
                if show:
                    show.show(state, line)
                if state in FINAL_STATES or (timeout is not None and time.monotonic() - start > timeout):
                    return state
                delay = poll if state != last else min(max(poll, 5.0), delay * 1.25)
                last = state
                time.sleep(delay)
        finally:
            if show:
                show.close()

    def report(self):
        """The checker's JSON report as a dict, or None (no report: not written, or not a check job)."""
        if self.report_path is None:
            return None
        if not self.report_path.exists() and self.state() == COMPLETED:
            time.sleep(2)  # a shared file system may show the file a little after the job ends
        try:
            return json.loads(self.report_path.read_text())
        except (OSError, ValueError):
            return None

    def log_tail(self, n=30):
        log = self.log or Path(self.info().get("StdOut", ""))
        try:
            return "\n".join(log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return f"(no log at {log})"

    def cancel(self):
        run_slurm_command("scancel", self.job_id)

    def _why(self, rec, state, rep):
        raw = rec.get("JobState", "")  # sacct's form keeps who cancelled: "CANCELLED by 1234"
        code, _, sig = rec.get("ExitCode", "?:0").partition(":")
        if state == TIMEOUT:
            return (f"reached its time limit ({rec.get('TimeLimit', '?')}) after "
                    f"{rec.get('RunTime', '?')} and was stopped; ask for more with time=... (sbatch --time)")
        if state == CANCELLED:
            by = f" by user id {raw.split(' by ')[-1]}" if " by " in raw else ""
            return "cancelled" + by + (" (preempted)" if raw.startswith("PREEMPTED") else "")
        if rep is not None and not rep.get("passed"):
            return f"some checks failed (exit code {code})"
        word = raw.split()[0] if raw.split() else "FAILED"
        parts = [word.lower().replace("_", " ")] if word != "FAILED" else []  # e.g. "out of memory"
        parts.append(f"exit code {code}")
        if sig not in ("0", ""):
            parts.append(f"signal {sig}")
        return ", ".join(parts)

    def summary(self, n=30):
        """What happened, for a person: the checker's report, or the reason and the log's tail."""
        rec = self.info()
        state, line = self._status(rec)
        if state not in FINAL_STATES:
            return line + (f"\n  log: {self.log}" if self.log else "")
        rep = self.report()
        lines = [line + ("" if state == COMPLETED else ": " + self._why(rec, state, rep))]
        if rep is not None:
            lines.append(format_report(rep))
        elif self.report_path is not None:
            lines.append(f"no report at {self.report_path}: the checker did not finish")
        if self.bench_dir is not None:
            lines.append(f"benchmark output: {self.bench_dir}")
        if rep is None or (state != COMPLETED and rep.get("passed")):
            lines.append(f"last lines of the job's log ({self.log or rec.get('StdOut', '?')}):")
            lines += ["  | " + x for x in self.log_tail(n).splitlines()]
        return "\n".join(lines)
