"""runtime/commlog/sentry: a switch turned and turned back between two looks still shows."""
import types

from rtp_course.runtime.commlog import sentry


def test_a_switch_turned_around_a_look_shows_after_it_is_restored():
    holder = types.SimpleNamespace(rules=True, dirs=("a.py",))
    sentry.seal([(holder, "rules"), (holder, "dirs")])
    sentry.look()
    assert sentry.seen() == []
    holder.rules = False
    sentry.look()                      # a logged call made while it was switched
    holder.rules = True
    assert sentry.seen() == ["SimpleNamespace.rules was switched"]


def test_sealing_again_starts_afresh_and_an_equal_new_value_is_a_change():
    holder = types.SimpleNamespace(dirs=("a.py",))
    sentry.seal([(holder, "dirs")])
    holder.dirs = tuple(["a.py"])      # equal, but not what the harness set
    assert sentry.seen() == ["SimpleNamespace.dirs was switched"]
    sentry.seal([(holder, "dirs")])
    assert sentry.seen() == []
