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


def test_the_report_leads_with_the_most_telling_world_size():
    """Issue 47: a ring made of all_gather failed at world sizes 1, 2 and 3; world size 1's
    message ("expected exactly 0", "with one rank there is nothing to rotate") led, where the
    larger ones name the rule broken. A telling failure beats a hang, more ranks beat one."""
    one = Result("context_parallel", "ring_attention", 1, "failed", "2 call(s), expected 0",
                 hint="with one rank there is nothing to rotate")
    two = Result("context_parallel", "ring_attention", 2, "failed", "2 collective call(s)",
                 hint="rule 'Point-to-point only'")
    three = Result("context_parallel", "ring_attention", 3, "failed", "2 collective call(s) (3)",
                   hint="rule 'Point-to-point only'")
    hang = Result("context_parallel", "ring_attention", 4, "deadlock", "deadlock")
    assert report.lead([one, two, three, hang]) is three
    assert report.lead([one, hang]) is one
    assert report.lead([hang, two]) is two
    page = report.text([one, two, three, hang])
    assert "(fails at world size 1, 2, 3, 4)" in page and "world size 3: 2 collective" in page, page
    assert "nothing to rotate" not in page, page


def test_a_hang_leads_with_the_size_it_hung_at_not_the_sizes_skipped_after():
    """The walkthrough's: a deadlock at 2 ranks led with world size 4's "not run: it did not
    finish at world size 2", where world size 2's own report says which rank waits for which."""
    hung = Result("context_parallel", "ring_attention", 2, "deadlock",
                  "deadlock: no rank moved for 6 s; rank 1 waited in wait() on irecv")
    skipped = [Result("context_parallel", "ring_attention", ws, "deadlock",
                      "not run: it did not finish at world size 2 (deadlock)",
                      details={"not_run_after": 2}) for ws in (3, 4)]
    assert report.lead([hung, *skipped]) is hung
    as_json = report.to_json([*skipped, hung])
    assert report.lead(as_json["exercises"]["context_parallel"]["checks"], get=dict.get) \
        ["world_size"] == 2
    from rtp_course.cluster.job import format_report       # a Slurm job's summary: the same lead
    assert "world size 2):" in format_report(as_json), format_report(as_json)


def test_a_todo_names_the_stub_that_raised_where_it_is_another_tasks():
    """Issue 47: the check of parallelize_2d (E6.2, written) ran E3's parallelize_transformer,
    still a stub, and the report said "parallelize_2d: not implemented yet (task E6.2)"."""
    other = Result("groups", "parallelize_2d", 2, "notimpl", task="E6.2",
                   message="not implemented yet: [E3.6] parallelize_transformer: walk the model")
    page = report.text([other])
    assert ("groups.parallelize_2d: it runs tensor_parallel.parallelize_transformer, not "
            "implemented yet (task E3.6, notebook 04 section 6)") in page, page
    assert "Its hint: walk the model" in page, page
    own = Result("groups", "parallelize_2d", 2, "notimpl", task="E6.2",
                 message="not implemented yet: [E6.2] parallelize_2d: broadcast")
    page = report.text([own])
    assert ("groups.parallelize_2d: not implemented yet (task E6.2, notebook 08 section 2). "
            "Hint: parallelize_2d: broadcast") in page, page
