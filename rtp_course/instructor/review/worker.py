"""The scan of submitted files in a process of its own, bounded in CPU time, memory and wall time.

A submission is data crafted by someone who may want its review never to end: a constant
that the folding would decompress to gigabytes, a nesting that makes the work quadratic.
fold.py bounds what it folds, but the scan as a whole is bounded here too: one worker
process (a fresh interpreter) scans a batch of files, a whole class's in one go, under

* RLIMIT_AS: LIMITS.memory of address space (a MemoryError flags the file, the worker
  goes on);
* RLIMIT_CPU: LIMITS.cpu_s seconds of CPU for each file (the worker raises its soft limit
  before each file; SIGXCPU ends it);
* a wall-clock guard in the parent: LIMITS.wall_s for each file, counted from the moment
  the worker says it takes the file up (the worker is killed).

A file whose scan runs out is flagged "scan-limit" (read it yourself); a new worker scans
the files left, so one file never costs the others their flags. The worker only parses:
nothing submitted is imported or run, there or here.

The same worker, bounded the same way, computes each submitted file's similarity
fingerprints and the sibling modules it imports (`fingerprint_modules`), so that the class's
comparison in the grader only intersects sets of numbers.

The protocol is one JSON object a line on the worker's stdout: {"ready": true} once it has
started, {"start": i} when it takes up file i, {"done": i, "answer": ...} when it is done
(the file's flags, or its fingerprints and imports).
"""
from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from rtp_course.course import EXERCISES
from rtp_course.instructor.review.scan import Flag, out_of, scan_file


@dataclass(frozen=True)
class Limits:
    cpu_s: int = 30             # CPU seconds for one file: a 2 MB module scans in ~7 s
    memory: int = 1 << 30       # the worker's address space (~250 MB for a 2 MB module)
    wall_s: float = 60.0        # wall-clock seconds for one file (a loaded machine is slower)
    start_s: float = 60.0       # wall-clock seconds for the worker to start


LIMITS = Limits()
_BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); "
         "from rtp_course.instructor.review.worker import main; main()")


def scan_dirs(dirs: dict, exercises, limits: Limits | None = None) -> dict:
    """{key: the flags of `<dir>/<exercise>.py` for each exercise} for {key: dir} (a missing
    file: no flag), every file in one bounded worker (restarted after a file that ran out)."""
    files, owner = [], []
    for key, folder in dirs.items():
        for exercise in exercises:
            path = Path(folder) / f"{exercise}.py"
            if path.is_file() and not path.is_symlink():
                files.append((os.path.abspath(path), path.name))
                owner.append(key)
    out: dict = {key: [] for key in dirs}
    for key, flags in zip(owner, scan_files(files, limits)):
        out[key] += flags
    return out


def scan_impl(impl_dir, exercises=EXERCISES, limits: Limits | None = None) -> list:
    """The flags of `<impl_dir>/<exercise>.py` for each exercise (a missing file: none): a
    file whose scan runs out of time or memory is flagged "scan-limit", and the other files
    are scanned all the same."""
    return scan_dirs({0: impl_dir}, exercises, limits)[0]


def scan_files(files: list, limits: Limits | None = None) -> list:
    """The flags of each (path, shown name) of `files`, in order, scanned in a bounded worker."""
    return _in_workers(files, limits or LIMITS, "scan",
                       lambda flags: [Flag(**f) for f in flags],
                       lambda name, why, started: [out_of(name, why) if started
                                                   else _not_scanned(name, why)])


def fingerprint_files(files: list, limits: Limits | None = None) -> list:
    """The similarity fingerprints (review/similarity.py) of each (path, stub's text or None)
    of `files`, in order, computed in a bounded worker: None for a file that ran out (its scan
    flags it) or could not be read."""
    return [made and made[0] for made in fingerprint_modules(files, limits)]


def fingerprint_modules(files: list, limits: Limits | None = None) -> list:
    """(fingerprints, the exercise modules it imports) of each (path, stub's text or None) of
    `files`, in order, made in a bounded worker; None as fingerprint_files says."""
    return _in_workers(files, limits or LIMITS, "prints",
                       lambda answer: (set(answer["prints"]), frozenset(answer["imports"])),
                       lambda name, why, started: None)


_TODO = object()


def _in_workers(files: list, limits: Limits, mode: str, result, ran_out) -> list:
    """`result(answer)` for each file a worker in `mode` finished, `ran_out(name, why,
    whether a worker started)` for one it did not; a new worker takes up the files left."""
    results: list = [_TODO] * len(files)
    while _TODO in results:
        first = results.index(_TODO)
        done, stopped = _run_worker(files[first:], limits, mode)
        for i, answer in enumerate(done):
            results[first + i] = result(answer) if answer is not None else None
        if stopped is None:
            continue
        why, started = stopped
        if not started:                 # no worker starts: say so for every file left
            for i in range(first + len(done), len(files)):
                results[i] = ran_out(str(files[i][1]), why, False)
            break
        results[first + len(done)] = ran_out(str(files[first + len(done)][1]), why, True)
    return results


def _not_scanned(name: str, how: str):
    return Flag(name, 1, f"the file could not be scanned: the scan's worker process did not start "
                         f"({how}): read the file", "scan-limit")


def _run_worker(files: list, limits: Limits, mode: str = "scan"):
    """Scan `files` in one worker: (the flags of the files it finished, in order; None when it
    finished them all, else (what the scan of the next one ran out of, whether the worker had
    started))."""
    import rtp_course
    root = str(Path(rtp_course.__file__).resolve().parent.parent)
    done: list = []
    with tempfile.TemporaryFile("w+") as request, tempfile.TemporaryFile("w+b") as errors:
        json.dump({"files": files, "limits": asdict(limits), "mode": mode}, request)
        request.flush()
        request.seek(0)
        proc = subprocess.Popen([sys.executable, "-I", "-c", _BOOT, root], stdin=request,
                                stdout=subprocess.PIPE, stderr=errors, cwd="/",
                                start_new_session=True)
        try:
            started, killed, done = _read(proc, limits, done)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.stdout.close()
            code = proc.wait()
        if len(done) == len(files):
            return done, None
        errors.seek(0, os.SEEK_END)
        errors.seek(max(0, errors.tell() - 400))
        tail = errors.read().decode("utf-8", "replace").strip().splitlines()[-1:]
    said = f": {tail[0][:200]}" if tail else ""
    signame = _signal_name(-code) if code < 0 else ""
    if not started:                     # not the file's doing
        how = (f"it took more than {limits.start_s:g} s" if killed else
               f"it ended on {signame}" if code < 0 else f"it exited with status {code}{said}")
        return done, (how, False)
    if killed:
        why = f"time ({limits.wall_s:g} s of wall-clock time)"
    elif code == -signal.SIGXCPU:
        why = f"CPU time ({limits.cpu_s} s)"
    elif code == -signal.SIGKILL:
        why = f"memory ({limits.memory >> 20} MB) or time (it was killed)"
    elif code < 0:
        why = f"memory or time (it ended on {signame})"
    else:
        why = f"time or memory (it exited with status {code}{said})"
    return done, (why, True)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _read(proc, limits: Limits, done: list):
    """Follow the worker's messages until it ends or overstays: (whether it started, whether it
    was killed for time, the flags of the files it finished)."""
    started, pending = False, []
    deadline = time.monotonic() + limits.start_s
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                if time.monotonic() < deadline:
                    continue
                proc.kill()
                return started, True, done
            chunk = os.read(proc.stdout.fileno(), 1 << 16)
            if not chunk:
                return started, False, done
            pending.append(chunk)
            if b"\n" not in chunk:             # a long line (many flags) is joined once
                continue
            *lines, rest = b"".join(pending).split(b"\n")
            pending = [rest]
            for line in lines:
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                if "ready" in msg:
                    started = True
                elif "start" in msg:
                    deadline = time.monotonic() + limits.wall_s
                elif "done" in msg:
                    done.append(msg.get("answer"))
                    deadline = time.monotonic() + limits.wall_s


# ---- the worker ------------------------------------------------------------------------------

def main() -> None:
    """The worker: limits itself, then scans the files stdin's request names."""
    import resource
    request = json.load(sys.stdin)
    limits = Limits(**request["limits"])
    signal.signal(signal.SIGXCPU, signal.SIG_DFL)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _, as_hard = resource.getrlimit(resource.RLIMIT_AS)
    memory = limits.memory if as_hard == resource.RLIM_INFINITY else min(limits.memory, as_hard)
    resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
    _, cpu_hard = resource.getrlimit(resource.RLIMIT_CPU)
    budget = len(request["files"]) * (limits.cpu_s + 2) + 10     # for them all: a backstop
    if cpu_hard == resource.RLIM_INFINITY or cpu_hard > budget:
        cpu_hard = budget
    resource.setrlimit(resource.RLIMIT_CPU, (cpu_hard, cpu_hard))
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)                       # nothing else reaches the protocol's pipe

    def say(**msg):
        out.write(json.dumps(msg) + "\n")

    say(ready=True)
    if request.get("mode") == "prints":
        return _fingerprint(request["files"], limits, cpu_hard, say)
    for i, (path, name) in enumerate(request["files"]):
        use = resource.getrusage(resource.RUSAGE_SELF)
        soft = min(int(use.ru_utime + use.ru_stime) + 1 + limits.cpu_s, cpu_hard)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, cpu_hard))
        say(start=i)
        try:
            flags = scan_file(path, name)
        except MemoryError:
            flags = [out_of(name, f"memory ({memory >> 20} MB)")]
        except OSError as e:
            flags = [Flag(name, 1, f"the file could not be read ({type(e).__name__}): read it",
                          "scan-limit")]
        except Exception as e:          # noqa: BLE001 - a bug of the scan's: the others go on
            flags = [Flag(name, 1, f"the file could not be scanned: the scan failed on it "
                                   f"({type(e).__name__}: {str(e)[:200]}): read the file", "scan-limit")]
        say(done=i, answer=[f.as_dict() for f in flags])
    out.close()


def _fingerprint(files: list, limits: Limits, cpu_hard: int, say) -> None:
    """The worker's other job: each file's fingerprints, less its stub's, and the exercise
    modules it imports (None: unreadable)."""
    import hashlib
    import resource
    from rtp_course.course import EXERCISES
    from rtp_course.instructor.review.similarity import fingerprints, imported
    from rtp_course.instructor.review.source import python_text
    made: dict = {}                     # a file seen before (a stub, a shared copy): its answer
    for i, (path, base) in enumerate(files):
        use = resource.getrusage(resource.RUSAGE_SELF)
        soft = min(int(use.ru_utime + use.ru_stime) + 1 + limits.cpu_s, cpu_hard)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, cpu_hard))
        say(start=i)
        try:
            with open(path, "rb") as fh:
                data = fh.read(2 << 20)
            key = hashlib.blake2b(data + b"\0" + (base or "").encode(), digest_size=16).digest()
            if key not in made:
                source = python_text(data)                  # as Python reads it (`# coding:`)
                made[key] = {"prints": sorted(fingerprints(source, base)),
                             "imports": sorted(imported(source, EXERCISES))}
            answer = made[key]
        except (OSError, MemoryError, RecursionError, SyntaxError, ValueError):
            answer = None
        say(done=i, answer=answer)
