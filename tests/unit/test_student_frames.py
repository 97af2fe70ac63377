"""What the report calls "your code" is the exercise files only. The default implementation,
rtp_course/, also holds the given code (checker, runtime): a directory prefix would show the
checker's frames as the student's, and name a check's file as a "called from" of theirs."""
import importlib.util
import sys
import types

from rtp_course.checker.worker import _student_frames
from rtp_course.course.impl import code_files
from rtp_course.runtime import commlog

EXERCISE = '''
def rotate(f):
    return f()
'''
GIVEN = '''
import rotation_under_test
def run(f):
    return rotation_under_test.rotate(f)
'''


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def package_with_given_code(tmp_path, monkeypatch):
    (tmp_path / "checker" / "public").mkdir(parents=True)
    (tmp_path / "rotation.py").write_text(EXERCISE)
    (tmp_path / "checker" / "public" / "rotation.py").write_text(GIVEN)
    monkeypatch.setitem(sys.modules, "rotation_under_test",
                        load(tmp_path / "rotation.py", "rotation_under_test"))
    check = load(tmp_path / "checker" / "public" / "rotation.py", "check_under_test")
    return types.SimpleNamespace(IMPL_DIR=tmp_path), check


def test_your_code_is_the_exercise_files_not_the_given_code_beside_them(tmp_path, monkeypatch):
    pkg, check = package_with_given_code(tmp_path, monkeypatch)

    def fail():
        raise ValueError("boom")
    try:
        check.run(fail)
    except ValueError as e:
        where = _student_frames(e, code_files(pkg))
    assert 'File "rtp_course/rotation.py", line' in where and str(tmp_path) not in where
    assert "checker" not in where


def test_a_call_site_is_not_said_to_be_called_from_a_check(tmp_path, monkeypatch):
    pkg, check = package_with_given_code(tmp_path, monkeypatch)
    monkeypatch.setattr(commlog.STATE, "code_dirs", code_files(pkg))
    site = check.run(lambda: commlog.caller())
    assert site.startswith("rotation.py:") and "called from" not in site, site
