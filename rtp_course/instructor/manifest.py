"""The grader's fingerprint: refuse to grade from an altered installation.

Everything a verdict depends on (the course package less the exercise
modules, the hidden checks, the reference solutions, nbgrader_config.py, and
the Python installation's site directories: their start-up code, the .pth files
and sitecustomize, by content, every other file by size and modification time)
is hashed into `grader-manifest.json` in the grading directory when the course
is released (`rtp-course release`) or sealed by hand (`rtp-course seal`, after
an intended change). `rtp-course grade` compares the files with it first and
refuses to grade if any was added, removed or changed since: a submission that
found a way around the confinement would otherwise grade everyone after it.
"""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import rtp_course
from rtp_course.course import EXERCISES
from rtp_course.instructor import REPOSITORY, grading_dir, hidden_checks_dir, solutions_dir

NAME = "grader-manifest.json"


class AlteredGrader(RuntimeError):
    """The grader's files differ from the manifest; the message lists them and what to do."""


def grader_files() -> dict[str, Path]:
    """{label: path} of every file the verdict depends on."""
    package = Path(rtp_course.__file__).resolve().parent
    exercises = {package / f"{m}.py" for m in EXERCISES}
    files = {f"rtp_course/{p.relative_to(package)}": p for p in package.rglob("*.py")
             if p not in exercises and "__pycache__" not in p.parts}
    for label, folder in (("hidden", hidden_checks_dir()), ("solutions", solutions_dir())):
        if folder:
            files.update({f"{label}/{p.relative_to(folder)}": p for p in folder.rglob("*.py")
                          if "__pycache__" not in p.parts})
    config = REPOSITORY / "nbgrader_config.py"
    if config.is_file():
        files["nbgrader_config.py"] = config
    return files


# Files of a site directory that run at every interpreter start: hashed by content.
STARTUP = ("sitecustomize.py", "usercustomize.py")


def site_dirs() -> list[Path]:
    """The site directories of the grader's Python (where pip installs torch and the rest)."""
    import site
    import sys
    dirs = set(site.getsitepackages()) | {site.getusersitepackages()}
    dirs |= {p for p in sys.path if p.rstrip("/").endswith(("site-packages", "dist-packages"))}
    return sorted(Path(d) for d in dirs if Path(d).is_dir())


def site_fingerprint() -> dict[str, str]:
    """{label: digest} of the site directories: start-up code by content, the rest by size and
    mtime (stat only: some 20,000 files of torch and its kin in about a tenth of a second). A
    .pth file written there would run in every later grading of every student."""
    out = {}
    for root in site_dirs():
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d != "__pycache__"]
            for name in filenames:
                path = Path(dirpath) / name
                label = f"site:{path}"
                try:
                    if name.endswith(".pth") or name in STARTUP:
                        out[label] = hashlib.sha256(path.read_bytes()).hexdigest()
                    else:
                        st = path.lstat()
                        out[label] = f"{st.st_size}:{st.st_mtime_ns}"
                except OSError:
                    continue
    return out


def fingerprint() -> dict[str, str]:
    files = {label: hashlib.sha256(path.read_bytes()).hexdigest()
             for label, path in sorted(grader_files().items())}
    return {**files, **site_fingerprint()}


def seal(course: Path | None = None) -> Path:
    """Write the manifest of the grader as it is now."""
    path = (course or grading_dir()) / NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(fingerprint(), indent=1) + "\n")
    return path


def verify(course: Path | None = None) -> int:
    """Raise AlteredGrader unless the grader's files match the manifest; return how many matched."""
    path = (course or grading_dir()) / NAME
    try:
        sealed = json.loads(path.read_text())
    except (OSError, ValueError):
        raise AlteredGrader(f"no grader manifest at {path}: run `rtp-course seal` once, before "
                            f"any submission runs (`rtp-course release` also writes it)") from None
    now = fingerprint()
    changed = sorted(k for k in sealed.keys() & now.keys() if sealed[k] != now[k])
    added, removed = sorted(now.keys() - sealed.keys()), sorted(sealed.keys() - now.keys())
    if changed or added or removed:
        lines = [f"  changed: {k}" for k in changed] + [f"  added:   {k}" for k in added] + \
                [f"  removed: {k}" for k in removed]
        raise AlteredGrader("the grader differs from its manifest (" + str(path) + "):\n"
                            + "\n".join(lines) + "\nIf you made these changes, run `rtp-course seal`;"
                            " if not, reinstall the course before grading anything.")
    return len(now)


def cli_seal(args) -> int:
    path = seal()
    print(f"grader manifest written to {path} ({len(json.loads(path.read_text()))} files)")
    return 0
