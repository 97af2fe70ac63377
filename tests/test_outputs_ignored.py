"""What the course's commands and jobs write into the repository's root is ignored by git: a
grades CSV, Slurm job logs and reports (they were left untracked in every instructor's and
student's `git status`). Checked with git itself, on a repository holding only .gitignore."""
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
OUTPUTS = ["grades.csv", "grading/gradebook.db", "slurm-jobs/rtp-check-7.out", "rtp-check-7.out",
           "rtp-check-7.json", "rtp-bench-7.out", "rtp-bench-7/bench.csv", "rtp-doctor-7.out",
           "rtp-train-7.out", "rtp-grade-7_0.out", "rtp-autograde-7_0.out", ".nbgrader.log"]


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    if shutil.which("git") is None:
        pytest.skip("no git here")
    path = tmp_path_factory.mktemp("repo")
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    shutil.copy(ROOT / ".gitignore", path / ".gitignore")
    return path


def _ignored(repo: Path, name: str) -> bool:
    return subprocess.run(["git", "-C", str(repo), "check-ignore", "-q", "--no-index", name]).returncode == 0


@pytest.mark.parametrize("path", OUTPUTS)
def test_each_output_is_ignored(repo, path):
    assert _ignored(repo, path), f"{path} is not ignored by .gitignore"


def test_the_slurm_templates_write_only_ignored_names(repo):
    for template in [*ROOT.glob("slurm/*.sbatch"), *ROOT.glob("rtp_course/instructor/*.sbatch")]:
        for name in re.findall(r"^#SBATCH --output=(\S+)", template.read_text(), re.M):
            sample = name.replace("%j", "7").replace("%A", "7").replace("%a", "0")
            assert _ignored(repo, sample), f"{template.name} writes {name}, which git does not ignore"


def test_source_files_are_not_ignored(repo):
    for path in ("rtp_course/comm.py", "notebooks/03_tp_communication.ipynb", "docs/INSTRUCTORS.md"):
        assert not _ignored(repo, path), path
