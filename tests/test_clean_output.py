"""What a person reads: a report without torch's warnings or tracebacks, one sentence per mistake.

Jupyter shows in a cell whatever the kernel's child processes write to their file
descriptors 1 and 2, so these tests run the checker in a subprocess and read both
streams whole, as a cell would show them.
"""
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rtp_course.checker import engine, report
from rtp_course.cli.progress import Bar
from rtp_course.notebook.demos import run_demo, short_failure
from rtp_course.notebook.demos.tp_comm import one_op

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


def edited(tmp_path, module, pairs, name="impl"):
    impl = tmp_path / name
    shutil.copytree(ROOT / "solutions", impl, ignore=shutil.ignore_patterns("__pycache__"))
    path = impl / f"{module}.py"
    text = path.read_text()
    for old, new in pairs:
        assert old in text, old
        text = text.replace(old, new, 1)
    path.write_text(text)
    return impl


def cell(code: str, **env) -> str:
    """stdout and stderr of `code` in a fresh interpreter, interleaved as a cell shows them."""
    r = subprocess.run([PY, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=300, env={**os.environ, **env}, cwd=ROOT)
    return r.stdout


def test_check_cell_shows_no_torch_warning_and_no_traceback(tmp_path):
    """all_gather_into_tensor is correct but deprecated in torch 2.13 (a FutureWarning on every
    call); Duplication's backward forgets its all-reduce; Split raises on rank 1."""
    impl = edited(tmp_path, "comm", [
        ("        parts = [torch.empty_like(x) for _ in range(world)]\n"
         "        dist.all_gather(parts, x.contiguous(), group=group)\n"
         "        return torch.cat(parts, dim=dim)",
         "        flat = torch.empty((world,) + tuple(x.shape), dtype=x.dtype, device=x.device)\n"
         "        dist.all_gather_into_tensor(flat, x.contiguous().unsqueeze(0), group=group)\n"
         "        return torch.cat(list(flat.unbind(0)), dim=dim)"),
        ("        dist.all_reduce(grad, group=ctx.group)", "        pass"),
        ("        ctx.dim, ctx.group = dim, group\n",
         "        ctx.dim, ctx.group = dim, group\n"
         "        if rank == 1:\n"
         "            raise ValueError('a student bug on rank 1')\n"),
    ])
    out = cell(f"from rtp_course.checker import check; check('comm', impl={str(impl)!r}, "
               f"world_sizes=[2])")
    assert "PASS  [E2.2] comm.AllGather" in out, out
    assert "FAIL  [E2.1] comm.Duplication" in out, out
    assert "ValueError: a student bug on rank 1" in out and "comm.py" in out, out
    assert "Warning" not in out and "Traceback" not in out, out


def test_syntax_error_is_reported_at_its_line_without_launching(tmp_path):
    impl = edited(tmp_path, "comm", [("def duplicate(x, group=None):", "def duplicate(x, group=None:")])
    results = engine.run(["comm"], impl=str(impl), world_sizes=[2])
    text = report.text(results)
    assert all(r.status == "error" for r in results), text
    assert "comm.py does not parse" in text and "def duplicate(x, group=None:" in text, text
    assert "inside torch" not in text and "Traceback" not in text, text
    # an exercise that imports the broken one is told which file and line, too
    results = engine.run(["tensor_parallel"], impl=str(impl), world_sizes=[2], only=["ColumnParallelLinear"])
    assert "comm.py does not parse" in report.text(results), report.text(results)


def test_a_file_python_cannot_even_compile_is_a_grade_not_a_grader_crash(tmp_path):
    """compile() of absurdly nested code raises MemoryError, not SyntaxError."""
    impl = edited(tmp_path, "comm", [])
    (impl / "comm.py").write_text("x = " + "-" * 200000 + "1\n")
    results = engine.run(["comm"], impl=str(impl), world_sizes=[1], only=["Duplication"])
    assert results and all(r.status == "error" for r in results), report.text(results)


@pytest.mark.extended     # wording of a rare case
def test_a_world_size_without_checks_is_one_sentence():
    r = subprocess.run([PY, "-m", "rtp_course.cli", "check", "comm", "--world-size", "9"],
                       capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert r.returncode == 2, r
    assert "no check of comm runs at world size 9" in r.stderr and "1, 2, 3, 4" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr + r.stdout
    out = cell("from rtp_course.checker import check; check('comm', world_sizes=[0])")
    assert "world size 0" in out and "Traceback" not in out, out


@pytest.mark.parametrize("args", [["submit", "check", "comm", "--gpus", "-1"],
                                  ["submit", "check", "comm", "--gpus", "2", "--world-size", "4"]])
def test_a_wrong_gpu_count_is_one_sentence(args):
    r = subprocess.run([PY, "-m", "rtp_course.cli", *args], capture_output=True, text=True,
                       timeout=120, cwd=ROOT)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "GPUs" in r.stderr.splitlines()[-1], r.stderr


def _ignoring_sigint():
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("started", [   # a background job in the extended tier
    "from a terminal", pytest.param("as a script's background job", marks=pytest.mark.extended)])
def test_sigint_stops_the_checker_in_one_line(tmp_path, started):
    """Ctrl-C at a terminal signals the whole foreground process group, workers included. A
    script's background job (bash without job control: the test command run with `&`) starts
    with SIGINT ignored; the command must still stop (it ran on to its hang limit)."""
    impl = edited(tmp_path, "comm", [("        dist.all_reduce(grad, group=ctx.group)",
                                     "        import time; time.sleep(60)")])
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    p = subprocess.Popen([PY, "-m", "rtp_course.cli", "check", "comm", "--impl", str(impl),
                          "--world-size", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True, start_new_session=True, env=env, cwd=ROOT,
                         preexec_fn=_ignoring_sigint if "background" in started else None)
    start = time.time()
    while not list(tmp_path.glob("rtp-check-*/status.1.json")) and time.time() < start + 60:
        time.sleep(0.2)
    seen = time.time() - start
    time.sleep(1.0)
    running = p.poll() is None
    os.killpg(p.pid, signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, (f"rank 1 seen after {seen:.1f} s, the command "
                                 f"{'running' if running else 'already ended'} at SIGINT, "
                                 f"ended after {time.time() - start:.1f} s", out, err)
    assert "interrupted" in err and "Traceback" not in err + out, err
    time.sleep(0.5)
    assert not [d for d in tmp_path.iterdir() if d.name.startswith("rtp-")], list(tmp_path.iterdir())


def test_a_failing_demo_prints_the_exception_and_the_students_line(tmp_path, monkeypatch, capsys):
    impl = edited(tmp_path, "comm", [
        ("        ctx.dim, ctx.group = dim, group\n",
         "        ctx.dim, ctx.group = dim, group\n"
         "        if rank == 1:\n"
         "            raise IndexError('slice past the end')\n")])
    monkeypatch.setenv("RTP_COURSE_IMPL", str(impl))
    assert run_demo(one_op, 2, "split", needs="comm.split", timeout=60) is None
    out = capsys.readouterr().out
    assert "[demo failed] rank 1: IndexError: slice past the end" in out, out
    assert "at comm.py:" in out and "Traceback" not in out, out


def test_peer_failures_and_crashes_are_said_in_words():
    gloo = ('Traceback (most recent call last):\n  File "/x/site-packages/torch/distributed/c10d.py", '
            'line 3, in all_reduce\nRuntimeError: [../gloo/transport/tcp/pair.cc:534] Connection closed by peer [127.0.0.1]:1')
    assert "another rank left a collective" in short_failure(gloo)
    assert short_failure("process killed by signal SIGSEGV") == "process killed by signal SIGSEGV"


class _Tty:
    def __init__(self, tty):
        self.tty, self.text = tty, ""

    def isatty(self):
        return self.tty

    def write(self, s):
        self.text += s

    def flush(self):
        pass


def test_progress_bar_only_on_a_terminal_and_erased_before_the_report():
    pipe = _Tty(False)
    bar = Bar(pipe)
    bar(3, 10, "world size 2")
    bar.clear()
    assert pipe.text == ""
    term = _Tty(True)
    bar = Bar(term)
    bar(5, 10, "world size 2")
    assert "5/10 checks" in term.text and "#" * 12 in term.text
    bar.clear()
    assert term.text.endswith("\r\033[K")
