"""Every file or folder the docs name in backticks exists: a path is written relative to the
repository or shortened to its last parts (`nccl/order.py` for rtp_course/runtime/nccl/order.py);
a file's bare name, a file of that name anywhere; a rename that leaves a doc behind fails here."""
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "DESIGN.md", ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PATH = re.compile(r"`([A-Za-z0-9_./-]+(?:\.py|\.md|\.sh|/))`")    # a file's name, or a folder/
# not the repository's: the system's, a home's, and the course directory `grading/` that the
# instructor's commands fill
THEIRS = {"distributed_c10d.py"}                                # torch's
SKIP = ("http", "/tmp/", "/proc/", "/dev/", "/sys/", "/etc/", "~", "$", "grading/")


def _files() -> set[str]:
    """The repository's files and folders (git's list: what a clean clone has)."""
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    found = set(listed)
    for f in listed:
        parts = f.split("/")
        found |= {"/".join(parts[:i]) + "/" for i in range(1, len(parts))}
    return found


FILES = _files()


def _named(doc: Path) -> list[str]:
    return sorted({m for m in PATH.findall(doc.read_text()) if not m.startswith(SKIP)
                   and "<" not in m and "*" not in m and "NN" not in m
                   and m not in THEIRS and m.strip("./")})


@pytest.mark.parametrize("doc", DOCS, ids=[d.name for d in DOCS])
def test_every_path_a_doc_names_exists(doc):
    missing = [name for name in _named(doc)
               if not any(f == name.lstrip("./") or f.endswith("/" + name.lstrip("./"))
                          for f in FILES)]
    assert not missing, f"{doc.name} names paths that do not exist: {missing}"
