"""What reaches a rank, and so its report, of the grader's environment: variables by exact
name only (runtime/forkserver.RANK_ENVIRONMENT), never a token whose name happens to start
like one."""
import os
import subprocess
import sys
import uuid

from hostile import at_forward, hostile
from rtp_course.runtime import forkserver

# The four, which the prefix list let through (LANG*, NVIDIA_*, ..., USER*), and
# secrets named like the families that are kept (NCCL_*, TORCH_*).
SECRETS = ("LANGCHAIN_API_KEY", "NVIDIA_API_KEY", "HOMEBREW_GITHUB_API_TOKEN", "USER_PASSWORD",
           "NCCL_SECRET_TOKEN", "TORCH_HUB_AUTH", "RTP_GRADER_SECRET")

SHOW_ENVIRONMENT = "\n".join([
    "import os as _os",
    "_seen = repr(dict(_os.environ))",
    "for _p in ('/proc/self/environ', f'/proc/{_os.getppid()}/environ', '/proc/1/environ'):",
    "    try:",
    "        _seen += open(_p, 'rb').read().decode(errors='replace')",
    "    except OSError:",
    "        pass",
    "raise RuntimeError('ENV ' + _seen)",
])


def test_an_environment_secret_does_not_reach_the_rank_or_its_report(tmp_path):
    """A plain `rtp-course check` (unconfined: the forkserver the ranks fork from was
    started with the rank environment only) shows a rank's whole environment in its report:
    none of the grader's secrets is there, while LANG and NCCL_DEBUG are. With the prefix
    list before the fix, LANGCHAIN_API_KEY, NVIDIA_API_KEY, HOMEBREW_GITHUB_API_TOKEN and
    USER_PASSWORD reached the report."""
    values = {name: f"hunter2-{uuid.uuid4().hex}" for name in SECRETS}
    impl = hostile(tmp_path, at_forward(SHOW_ENVIRONMENT))
    env = dict(os.environ, **values, LANG="C.UTF-8", NCCL_DEBUG="WARN", RTP_COURSE_WARM="0")
    out = subprocess.run([sys.executable, "-m", "rtp_course.cli", "check", "comm", "--impl",
                          str(impl), "--world-size", "2", "--only", "Duplication", "-v"],
                         env=env, capture_output=True, text=True, timeout=300)
    said = out.stdout + out.stderr
    assert "ENV " in said and "'NCCL_DEBUG': 'WARN'" in said and "'LANG'" in said, said
    assert not [name for name, value in values.items() if value in said or name in said], said


def test_names_are_kept_exactly_or_by_a_family_without_secrets():
    """The rule itself: an exact name, or a configuration family (NCCL_*, OMP_*, ...) less
    any name that says it holds a key, token, secret, password, credential or auth."""
    kept = ("PATH", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", "NCCL_SOCKET_IFNAME",
            "NCCL_IB_PKEY", "OMP_NUM_THREADS", "TORCH_NCCL_BLOCKING_WAIT", "SLURM_JOB_ID",
            "RTP_LAUNCH_MARK")
    refused = (*SECRETS, "LANGUAGE_MODEL_KEY", "LC_SECRET", "CUDA_API_TOKEN", "PATHS",
               "SLURM_AUTH_TOKEN", "OMP_PASSWORD", "NCCL_KEY", "NCCL_IB_PASSPHRASE",
               "USER", "LOGNAME", "SHELL", "TERM",
               # who submitted a Slurm job, from where, under which account: the red team put
               # them in an exception, and the student's page showed the instructor's
               "SLURM_JOB_USER", "SLURM_JOB_UID", "SLURM_JOB_ACCOUNT", "SLURM_SUBMIT_HOST",
               "SLURM_SUBMIT_DIR", "SLURM_CLUSTER_NAME", "SLURM_JOB_NAME", "SLURM_JOB_PARTITION")
    assert all(forkserver.kept_for_ranks(n) for n in kept)
    assert not [n for n in refused if forkserver.kept_for_ranks(n)]


def test_path_and_home_are_neutral():
    """The grader's PATH and HOME say where its files are: a rank gets the Python's own
    directory and the system's, and a home in the temporary directory."""
    env = forkserver.rank_environment({"PATH": "/home/grader/bin:/usr/bin", "HOME": "/home/grader"})
    assert "grader" not in env["PATH"] + env["HOME"]
    assert os.path.dirname(sys.executable) in env["PATH"].split(os.pathsep)
