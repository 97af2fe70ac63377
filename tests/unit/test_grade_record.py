"""What `rtp-course grade` writes into a student's autograded notebook, and where it never writes."""


def test_a_report_is_never_written_through_a_link_in_the_autograded_folder(tmp_path):
    """A student's kernel (or what it left running) replaced its autograded notebook by a
    link to a classmate's: `rtp-course grade` writes the linker's report through it never,
    and the classmate's own report into her notebook as always."""
    import nbformat
    from rtp_course.instructor.grade_code import GradedCell
    from rtp_course.instructor.grade_record import write_feedback
    course = tmp_path / "course"
    victim = course / "autograded" / "alice" / "03" / "nb.ipynb"
    victim.parent.mkdir(parents=True)
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(
        "grade('comm')", metadata={"nbgrader": {"grade_id": "comm-code", "grade": True}})])
    nbformat.write(nb, victim)
    before = victim.read_text()
    linker = course / "autograded" / "linker" / "03" / "nb.ipynb"
    linker.parent.mkdir(parents=True)
    linker.symlink_to(victim)
    report = course / "checks" / "linker" / "03" / "comm.txt"
    report.parent.mkdir(parents=True)
    report.write_text("comm: 10 of 10 points for your code\n")
    write_feedback(course, "03", "linker", [GradedCell("nb", "comm-code", "comm", 10.0)])
    assert victim.read_text() == before
    (course / "checks" / "alice" / "03").mkdir(parents=True)
    (course / "checks" / "alice" / "03" / "comm.txt").write_text("comm: 7 of 10 points\n")
    write_feedback(course, "03", "alice", [GradedCell("nb", "comm-code", "comm", 10.0)])
    assert "comm: 7 of 10 points" in victim.read_text()      # her own: written


def test_the_page_shows_no_graders_directory_even_glued_to_a_word(tmp_path):
    """A red team's: an exception's message "x" + os.__file__ (or + the temporary directory)
    reached the page as x/root/.pyenv/.../os.py: a path after a word character was not taken
    for one. The grader's own directories are cut wherever they stand."""
    import os
    import sys
    import tempfile
    from rtp_course.instructor.grade_record import student_view
    impl = tmp_path / "course" / "submitted" / "alice" / "03" / "rtp_course"
    text = (f"ValueError: x{os.__file__} y{sys.base_prefix} z{tempfile.gettempdir()}/rtp-check-w2/t.0 "
            f"w{impl}/comm.py and rtp_course/comm.py:12 stay")
    shown = student_view(text, impl)
    for directory in (sys.base_prefix, sys.prefix, tempfile.gettempdir(), str(tmp_path)):
        assert directory not in shown, shown
    assert "xos.py" in shown and "rtp_course/comm.py:12 stay" in shown, shown
