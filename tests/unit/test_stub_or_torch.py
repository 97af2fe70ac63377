"""Only the stub's own `raise NotImplementedError` is a TODO: torch's NotImplementedError, from
an operator called on the student's line, is an error of the student's code (E10 finding M49:
counts in float64 made repeat_interleave refuse, and the report said "not implemented yet")."""
import importlib.util

import pytest
import torch

from rtp_course.checker.worker import _outcome_of, raised_by_a_stub

EXERCISE = '''
import torch

def stub():
    raise NotImplementedError("[E10.2] exchange_splits: one all-to-all of the counts")

def torch_refuses(counts):
    return torch.arange(3).repeat_interleave(counts)     # float counts: NotImplementedError
'''


@pytest.fixture
def module(tmp_path):
    path = tmp_path / "experts.py"
    path.write_text(EXERCISE)
    spec = importlib.util.spec_from_file_location("experts_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod, (str(path),)


def caught(fn):
    try:
        fn()
    except NotImplementedError as e:
        return e
    raise AssertionError("no NotImplementedError")


def test_the_stubs_raise_is_a_todo(module):
    mod, files = module
    e = caught(mod.stub)
    assert raised_by_a_stub(e, files)
    assert _outcome_of(e, files, "forward")["status"] == "notimpl"


def test_torchs_own_not_implemented_on_the_students_line_is_an_error(module):
    mod, files = module
    e = caught(lambda: mod.torch_refuses(torch.ones(3, dtype=torch.float64)))
    assert not raised_by_a_stub(e, files)
    outcome = _outcome_of(e, files, "forward")
    assert outcome["status"] == "error" and "repeat_interleave" in outcome["message"], outcome
