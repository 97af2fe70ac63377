"""checker/channel.Server's facts about its ranks are the parent's own: what a rank said
before the code under test ran, and whether the parent (not the rank) is what a rank waits
for."""
import socket
import time

from rtp_course.checker import channel, wire


class _Slow:
    """A provider that takes `delay` s to answer, with `size` bytes of reply."""

    def __init__(self, delay=0.0, size=8):
        self.delay, self.size = delay, size

    def serve(self, rank, header, index):
        time.sleep(self.delay)
        return {"pad": "x" * self.size}, []


def _until(predicate, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def test_the_parent_records_which_ranks_began_the_code_under_test():
    server = channel.Server(2, _Slow()).start()
    try:
        sock = server.rank_ends()[1]
        wire.send(sock, wire.encode({"what": channel.ENTER, "index": -1}))
        header, _ = wire.read_frame(sock.makefile("rb"))
        assert "error" not in header
        assert server.entered == {1}
    finally:
        server.stop()


def test_the_parent_is_busy_while_it_computes_an_answer():
    server = channel.Server(1, _Slow(delay=1.0)).start()
    try:
        sock = server.rank_ends()[0]
        wire.send(sock, wire.encode({"what": "randn", "index": 0}))
        assert _until(server.busy)
        assert _until(lambda: not server.busy())        # answered: the rank's turn
    finally:
        server.stop()


def test_a_rank_that_never_reads_its_replies_does_not_keep_the_parent_busy():
    """A rank that sends requests and reads no reply fills the channel: the parent's thread
    waits to send, and that wait is the rank's, so blocked ranks can still be found hung."""
    server = channel.Server(1, _Slow(size=1 << 20)).start()
    try:
        sock = server.rank_ends()[0]
        sock.setblocking(False)
        sent = 0
        for _ in range(64):               # requests pile up behind a reply nobody reads
            try:
                sock.send(b"".join(bytes(p) for p in wire.encode({"what": "randn",
                                                                  "index": 0})))
                sent += 1
            except BlockingIOError:
                break
        assert sent >= 2
        time.sleep(0.5)
        assert _until(lambda: not server.busy(), timeout=5.0)
        time.sleep(0.3)
        assert not server.busy()
    finally:
        server.stop()
