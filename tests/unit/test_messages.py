"""The course's words, one home (rtp_course/course/messages.py): every id the checker says
exists and every message is said somewhere; each renders, and a report that says it, wrapped
as a page wraps it, is found by its id and by no other's."""
import re
import textwrap
from pathlib import Path

import pytest

from rtp_course.checker.diagnosis import exception_hint
from rtp_course.course import messages
from rtp_course.course.messages import MESSAGES, ids_in, say

PACKAGE = Path(messages.__file__).resolve().parents[1]
SAID = re.compile(r"""say\(\s*["']([\w.-]+)["']""")


def _code() -> str:
    return "\n".join(f.read_text() for f in PACKAGE.rglob("*.py")
                     if f.name != "messages.py")


def _rendered(id: str) -> str:
    fields = re.findall(r"\{(\w+)\}", MESSAGES[id].text)
    return say(id, **{f: f"<{f}>" for f in fields})


def test_every_id_said_exists_and_every_message_is_said():
    code = _code()
    said = set(SAID.findall(code))
    assert said - set(MESSAGES) == set(), "said but not in messages.py"
    # exception causes are said by their table (diagnosis._TIERS), the rest by say()
    unsaid = [m.id for m in MESSAGES.values() if not m.tier and m.id not in said]
    assert unsaid == [], "messages nobody says: remove them, or say them"


@pytest.mark.parametrize("id", sorted(MESSAGES))
def test_a_message_is_found_by_its_id_wrapped_or_not(id):
    text = _rendered(id)
    page = textwrap.fill(f"        hint: {text}", 60, subsequent_indent="              ")
    assert id in ids_in(f"FAIL  [E2.1] comm.AllReduce\n{text}\n")
    assert id in ids_in(page)


def test_no_message_is_taken_for_another():
    taken = {id: ids_in(_rendered(id)) - {id} for id in MESSAGES}
    assert {id: others for id, others in taken.items() if others} == {}


@pytest.mark.parametrize("m", [m for m in MESSAGES.values() if m.tier],
                         ids=lambda m: m.id)
def test_each_cause_is_what_its_exception_shows(m):
    """The exception text each cause is written for picks it, not an earlier cause."""
    assert m.tier in ("sure", "likely")
    re.compile(m.shows)
    samples = {"exception.backward-twice": None}   # "sure" graph-freed says it first
    if m.id in samples:
        return
    example = re.sub(r"\\d\+|\\\(|\\\)|\\\[|\\\]|\\\.|\\", lambda g: {
        r"\d+": "3", r"\(": "(", r"\)": ")", r"\[": "[", r"\]": "]", r"\.": "."}.get(g[0], ""),
        m.shows.split("|")[0])
    assert exception_hint(example, m.tier) == m.text, example


def test_a_field_is_filled_and_a_missing_one_is_an_error():
    assert "rank(s) 0, 2 finished" in say("hang.left-out", done="0, 2", calls="all_reduce")
    with pytest.raises(KeyError):
        say("hang.left-out", done="0")
