"""What decides a verdict is the grader's own evidence, never what a rank wrote or said.

A rank's code can rewrite its status file, print a transport's error, and fill its channel
to the parent. None of it may turn a failing check into "not graded" or keep a hang from
being seen: the parent knows from its own end of the channel whether the code under test
ran (channel.Server.entered), and counts itself busy only while it computes an answer."""
from hostile import at_forward, hostile, run
from rtp_course.checker.verdict import NOT_GRADED

# Every rank, together: names no check in its status (as if nothing had started), says the
# machine lost its connections, and leaves.
FORGED_TRANSPORT = """import gc as _gc, os as _os, sys as _sys, posix as _px
__import__('torch.distributed').distributed.barrier()
for _o in _gc.get_objects():
    if type(_o).__name__ == 'Status':
        _os.pwrite(_o._fd, b'{}' + b' ' * 400, 0)
        _o.update = lambda **kw: None
_sys.stderr.write('torch.distributed.DistNetworkError: Connection reset by peer\\n')
_sys.stderr.flush()
_px._exit(1)"""


def test_a_rank_that_says_the_machine_broke_its_connections_fails_its_check(tmp_path):
    results, text = run(hostile(tmp_path, at_forward(FORGED_TRANSPORT)), only=("Duplication",))
    assert results and results[0].status not in NOT_GRADED and not results[0].passed, text


# Asks the parent for a reply bigger than the channel holds, never reads it, and waits for
# ever: the parent's thread waits to send, which is the rank's doing, not the parent's.
UNREAD_REPLY = """import gc as _gc, time as _time
from rtp_course.checker import wire as _w
for _o in _gc.get_objects():
    if type(_o).__name__ == '_Link':
        _frame = _w.encode({'what': 'randn', 'seed': 1, 'shape': [1 << 18], 'dtype': 'float64',
                            'owner': [__import__('torch.distributed').distributed.get_rank()],
                            'index': 0})
        _o.sock.sendall(b''.join(bytes(_p) for _p in _frame))
while True:
    _time.sleep(0.05)"""


def test_a_rank_that_never_reads_its_reply_is_a_hang(tmp_path):
    results, text = run(hostile(tmp_path, at_forward(UNREAD_REPLY)), only=("Duplication",))
    assert results[0].status in ("deadlock", "busy"), text
    assert "no rank moved" in results[0].message or results[0].status == "busy", text
