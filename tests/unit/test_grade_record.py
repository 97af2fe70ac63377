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
