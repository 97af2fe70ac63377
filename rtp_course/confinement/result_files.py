"""The run's files a rank writes (its checks' outcomes), watched for writes not the worker's.

The worker opens each check's outcome file before the rank is confined, so the code under
test inherits the descriptors: it can find them (/proc/self/fd, os.fstat) and write a
forged outcome through one before the worker writes the real one, or keep a duplicate to
write through after. Grading watches both ways (worker.run_checks): before each outcome is
written its file must be untouched (empty, its offset at 0), and no descriptor of the run's
own files may be held beyond those the worker had when the code under test was imported.
A write through a descriptor the worker itself holds, after it wrote and before the parent
read, is in-process tampering this watch does not see (docs/SECURITY.md).
"""
from __future__ import annotations

import os
from pathlib import Path

from rtp_course.confinement.integrity import harness_changed


def held(rundir: Path) -> dict[int, str]:
    """{descriptor: path} of this process's descriptors of files directly in `rundir` (the
    rank's scratch directory below it is the code under test's own)."""
    folder, found = str(rundir), {}
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return found
    for name in fds:
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if os.path.dirname(target) == folder:
            found[int(name)] = target
    return found


class Watch:
    """Made once the worker opened every file it writes, before the code under test runs."""

    def __init__(self, rundir: Path):
        self.rundir = Path(rundir).resolve()
        self.own = held(self.rundir)

    def checked(self, fh, outcome: dict) -> dict:
        """`outcome`, or a HARNESS CHANGED outcome if its file was tampered with."""
        why = self.before_write(fh)
        return harness_changed(outcome, f"wrote the checker's own files: {why}") if why \
            else outcome

    def before_write(self, fh) -> str | None:
        """Why the outcome about to be written through `fh` cannot be trusted, or None."""
        fd = fh.fileno()
        if os.fstat(fd).st_size or os.lseek(fd, 0, os.SEEK_CUR):
            return "a check's outcome file was written before the checker wrote it"
        extra = sorted(Path(p).name for fd, p in held(self.rundir).items()
                       if self.own.get(fd) != p)
        if extra:
            return f"a second descriptor of the run's files is open ({', '.join(extra[:3])})"
        return None

