"""sandbox._readable: what a confined rank may open when part of a granted tree must stay
closed (Landlock has no deny rule: the tree is granted around it)."""
from rtp_course.runtime import sandbox


def test_a_tree_is_granted_around_its_unreadable_part(tmp_path):
    site = (tmp_path / "site-packages").resolve()      # an installed (not editable) course
    for f in ["torch/__init__.py", "rtp_course/comm.py", "rtp_course/checker/common.py",
              "rtp_course/checker/public/comm.py", "rtp_course/runtime/launcher.py"]:
        (site / f).parent.mkdir(parents=True, exist_ok=True)
        (site / f).write_text("")
    public = site / "rtp_course" / "checker" / "public"
    full, listed = sandbox._readable([str(site), str(site / "rtp_course")], [public])
    # both roots lead to the package: its directories on the way may only be listed
    assert set(listed) == set(map(str, [site, site / "rtp_course", site / "rtp_course" / "checker"]))
    assert str(site / "torch") in full and str(site / "rtp_course" / "runtime") in full
    assert str(site / "rtp_course" / "checker" / "common.py") in full
    assert not [p for p in full if p.startswith(str(public))]


def test_without_an_unreadable_part_a_root_is_one_rule(tmp_path):
    assert sandbox._readable([str(tmp_path)], []) == ([str(tmp_path.resolve())], [])
