"""confinement/pidns: the launcher sees the rank's own end, and nothing the rank started lives on."""
import signal
import subprocess
import sys
import textwrap

import pytest

from rtp_course.confinement import netns

pytestmark = pytest.mark.skipif(not netns.available(),
                                reason="this machine makes no user namespaces (refused to users)")


def split_then(code: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """A process that isolates itself and splits, then runs `code` as the rank. (`timeout`
    bounds a hang only: importing torch took over 30 s at load average 39.)"""
    script = textwrap.dedent("""
        import os, sys, time, signal
        from rtp_course.confinement import netns, pidns
        netns._private_network(loopback=False)
        assert netns.unshare_own() & netns.CLONE_NEWPID, "no PID namespace"
        pidns.split()
    """) + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.parametrize("code,returncode", [
    ("sys.exit(3)", 3),
    ("os.abort()", -signal.SIGABRT),                   # pid 2: not an init that ignores it
    ("os.kill(os.getpid(), signal.SIGKILL)", -signal.SIGKILL),
    ("assert os.getpid() == 2 and os.getppid() == 1", 0),
])
def test_the_launcher_sees_the_ranks_own_end(code, returncode):
    assert split_then(code).returncode == returncode


def test_what_the_rank_leaves_ends_with_it(tmp_path):
    """A detached grandchild (its own session) that would outlive a plain process: it waits
    until the rank has ended (the test says so), then would leave a mark. However slow the
    machine, a grandchild still alive then leaves it; one that ended with the rank cannot."""
    go, flag = tmp_path / "rank ended", tmp_path / "alive"
    done = split_then(f"""
        if os.fork() == 0:
            os.setsid()
            while not os.path.exists({str(go)!r}):
                time.sleep(0.01)
            open({str(flag)!r}, "w").close()
            os._exit(0)
        time.sleep(0.1)
    """)
    assert done.returncode == 0, done.stderr
    go.touch()
    import time
    time.sleep(2.0)
    assert not flag.exists()


def test_sigusr1_reaches_the_rank():
    """The launcher asks a stuck rank for its stack with SIGUSR1, sent to its own child."""
    script = textwrap.dedent("""
        import os, sys, time, signal, faulthandler
        from rtp_course.confinement import netns, pidns
        netns._private_network(loopback=False)
        assert netns.unshare_own() & netns.CLONE_NEWPID
        pidns.split()
        faulthandler.register(signal.SIGUSR1, file=sys.stdout, all_threads=False)
        print("ready", flush=True)
        time.sleep(20)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGUSR1)
        assert proc.stdout.readline().startswith("Stack (most recent call first)")
        proc.terminate()                               # forwarded as SIGKILL
        assert proc.wait(timeout=10) == -signal.SIGKILL
    finally:
        proc.kill()
