"""What a student reads is the course's words: the transport's source locations and a peer's
address are left out of a message, and a feedback page leaves out how the grader confined
the ranks (the instructor's fact)."""
from rtp_course.checker import report
from rtp_course.checker.verdict import Result

GLOO = ("rank 1 crashed: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/"
        "tcp/pair.cc:537] Read error [127.0.0.1]:21393: Connection reset by peer")


def test_the_transports_locations_and_addresses_are_left_out():
    said = report.plain(GLOO)
    assert said == "rank 1 crashed: RuntimeError: Read error (a peer): Connection reset by peer"
    kept = "max abs error 1.5 at index [0, 1]: expected 2.5, got 1; torch 2.13.0"
    assert report.plain(kept) == kept


def test_torchs_log_lines_sockets_ipv6_peers_and_gloos_enforce_lines_are_left_out():
    said = report.plain(
        "rank 2 crashed: [rank2]:[W1129 10:55:10.123 socket.cpp:494] [c10d] waitForInput: "
        "socket SocketImpl(fd=9, addr=[100:100:0:ff01:100:100::]:33431, "
        "remote=[fdff:ffff::1]:15842) timed out after 3000ms; what():  [enforce fail at "
        "/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:456] 48 vs 24.")
    assert said == "rank 2 crashed: waitForInput: a socket timed out after 3000ms; what():  48 vs 24."
    kept = "a slice x[1:2]:3 of shape [12, 8] float32"
    assert report.plain(kept) == kept


def test_a_feedback_page_leaves_out_the_confinement():
    r = Result("comm", "AllReduce", 2, "error", GLOO, details={"confinement": "confined (Landlock ABI 7; seccomp; as uid 1879073207)"})
    page = report.text([r], confinement=False)
    assert "Landlock" not in page and "uid" not in page and "21393" not in page, page
    assert "Landlock" in report.text([r])            # the instructor's report keeps it
