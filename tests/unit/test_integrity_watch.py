"""The tampering watch's quick comparison (confinement/integrity.py) sees every change its
full comparison names, and Python's own caches added to a class leave it quiet."""
import copyreg

import pytest
import torch

import rtp_course.checker.worker  # noqa: F401  (the harness a rank has loaded)
from rtp_course.confinement import integrity
from rtp_course.runtime.commlog import wrap


@pytest.fixture
def watch():
    return integrity.Watch()


def _message(watch) -> str:
    return watch.end({"status": "ok"}).get("message", "")


def _a_function(module):
    return next(v for v in vars(module).values()
                if type(v).__name__ == "function" and v.__module__ == module.__name__)


def test_nothing_changed_is_quiet(watch):
    assert watch.end({"status": "ok"}) == {"status": "ok"}


def test_a_function_given_other_code_is_named(watch):
    f = _a_function(wrap)
    code = f.__code__
    f.__code__ = (lambda *a, **k: None).__code__
    try:
        assert f"{wrap.__name__}.{f.__name__} was given other code" in _message(watch)
    finally:
        f.__code__ = code


def test_a_function_given_other_defaults_is_named(watch):
    f = next(v for v in vars(wrap).values() if type(v).__name__ == "function"
             and v.__module__ == wrap.__name__ and v.__defaults__)
    defaults = f.__defaults__
    f.__defaults__ = tuple(None for _ in defaults)
    try:
        assert f"{f.__name__} was given other code" in _message(watch)
    finally:
        f.__defaults__ = defaults


@pytest.mark.parametrize("how", ["replaced", "removed"])
def test_a_harness_name_replaced_or_removed_is_named(watch, how):
    f = _a_function(wrap)
    if how == "replaced":
        setattr(wrap, f.__name__, lambda *a, **k: None)
    else:
        delattr(wrap, f.__name__)
    try:
        assert f"{wrap.__name__}.{f.__name__} was {how}" in _message(watch)
    finally:
        setattr(wrap, f.__name__, f)


def test_a_method_added_to_a_watched_class_is_named(watch):
    torch.Tensor.leak_answers = lambda self: None
    try:
        assert "torch.Tensor.leak_answers was added" in _message(watch)
    finally:
        del torch.Tensor.leak_answers


def test_python_caches_added_to_a_class_stay_quiet_and_later_changes_show(watch):
    cls = integrity.Watch
    assert "__slotnames__" not in vars(cls)
    copyreg._slotnames(cls)                    # what pickling a class's object adds to it
    try:
        assert watch.end({"status": "ok"}) == {"status": "ok"}
        assert watch.end({"status": "ok"}) == {"status": "ok"}
        f = _a_function(wrap)
        code = f.__code__
        f.__code__ = (lambda *a, **k: None).__code__
        try:
            assert "was given other code" in _message(watch)
        finally:
            f.__code__ = code
    finally:
        if "__slotnames__" in vars(cls):
            delattr(cls, "__slotnames__")
