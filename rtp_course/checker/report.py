"""Turn Results into what a student reads (text) and what tools read (JSON)."""
from __future__ import annotations

import json
import re
import textwrap
from collections import OrderedDict

from rtp_course import course
from rtp_course.checker.types import NOT_GRADED, Result, Verdict

MARK = {Verdict.PASSED: "PASS", Verdict.FAILED: "FAIL", Verdict.NOTIMPL: "TODO",
        Verdict.ERROR: "ERROR", Verdict.DEADLOCK: "HANG", Verdict.BUSY: "BUSY",
        Verdict.NOTRUN: "NOT RUN"}


def by_check(results):
    grouped = OrderedDict()
    for r in results:
        grouped.setdefault((r.exercise, r.check), []).append(r)
    return grouped


def where_taught(r: Result) -> str:
    """'task E2.1, notebook 03 section 2' for the check of `r` ('' if it has no task)."""
    if not r.task:
        return ""
    ex = course.exercise(r.exercise)
    return f"task {r.task}, notebook {ex.notebook_number} section {ex.task(r.task).section}"


# How much a failure at one world size tells, by its status: a named value or rule, or an
# exception with its line, first; a hang next; what was not graded last.
_TELLS = {Verdict.FAILED: 2, Verdict.ERROR: 2, Verdict.DEADLOCK: 1}


def lead(bad: list, get=getattr):
    """The failure a check's report leads with, of its failures at several world sizes: the
    most telling status, then one that ran (not a size skipped because a smaller one hung:
    that one says where it hung), then one with more than one rank (with one rank a
    distributed bug degenerates: nothing to rotate, nobody to sum with), then the largest world
    size. `get` reads a field (getattr for Results; dict.get for the JSON report's checks)."""
    def tells(r):
        ws = get(r, "world_size") or 0
        ran = get(r, "not_run_after") is None
        return (get(r, "status") == Verdict.NOTIMPL, _TELLS.get(get(r, "status"), 0), ran, ws > 1, ws)
    return max(bad, key=tells)


def visible(text: str) -> str:
    """`text` with every character a terminal would act on, or that hides what follows,
    shown as an escape: the code under test writes its exceptions and prints, and a report
    is read in the instructor's terminal (an escape sequence there can set the clipboard,
    rewrite the screen or retitle the window) and in feedback pages (bidirectional
    overrides reorder a line)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c in "\n\t" else c.encode("unicode_escape").decode()
                   for c in text)


def _visible_strings(obj):
    if isinstance(obj, str):
        return visible(obj)
    if isinstance(obj, dict):
        return type(obj)((k, _visible_strings(v)) for k, v in obj.items())
    if isinstance(obj, list):
        return [_visible_strings(v) for v in obj]
    return obj


# The transport's own words, which say nothing to a student: gloo's source location
# ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] "), torch's log
# prefix ("[rank2]:[W1129 10:55:10.1 socket.cpp:494] [c10d] "), a socket's description and a
# peer's address and port ("[127.0.0.1]:21393", "[fdff:ffff::1]:15842").
_SOURCE_LOCATION = re.compile(r"\[[^\]\s]*/(?:third_party|gloo|c10d|torch)/[^\]\s]*:\d+\]\s*"
                              r"|\[rank\d+\]:\[[A-Z]\d{4} [^\]]*\]\s*|\[c10d\]\s*"
                              r"|\[enforce fail at [^\]]*\]\s*")
_SOCKET = re.compile(r"(?:socket )?SocketImpl\([^()]*\)")
_ADDRESS = re.compile(r"\[?\b\d{1,3}(?:\.\d{1,3}){3}\]?:\d{2,5}\b"
                      r"|\[(?:[0-9A-Fa-f]{0,4}:){2,}[0-9A-Fa-f.%\w]*\]:\d{2,5}\b")


def plain(message: str) -> str:
    """A message in the course's words: the transport's source locations and addresses out."""
    return _ADDRESS.sub("(a peer)", _SOCKET.sub("a socket", _SOURCE_LOCATION.sub("", message)))


def text(results: list[Result], verbose: bool = False, width: int | None = None,
         confinement: bool = True) -> str:
    """The report; with `width`, long lines wrap under their own indentation (for pages, such
    as nbgrader's feedback, that would otherwise cut them at the right edge). `confinement`:
    end with how the code under test ran (the instructor's fact: a student's feedback page
    leaves it out)."""
    body = visible(_text(results, verbose, confinement))
    return body if width is None else "\n".join(_wrap(line, width) for line in body.splitlines())


def _wrap(line: str, width: int) -> str:
    if len(line) <= width:
        return line
    indent = " " * (len(line) - len(line.lstrip()))
    return textwrap.fill(line.strip(), width, initial_indent=indent,
                         subsequent_indent=indent + "  ", break_on_hyphens=False)


def _text(results: list[Result], verbose: bool, confinement: bool = True) -> str:
    lines = []
    for (ex, name), rs in by_check(results).items():
        bad = [r for r in rs if not r.passed]
        sizes = ",".join(str(r.world_size) for r in rs)
        task = f"[{rs[0].task}] " if rs[0].task else ""
        if not bad:
            lines.append(f"  PASS  {task}{ex}.{name}  (world sizes {sizes})")
            continue
        first = lead(bad)
        if first.status == Verdict.NOTIMPL:
            lines.append(f"  TODO  {task}{ex}.{name}: {_todo(first)}")
            continue
        where = ", ".join(str(r.world_size) for r in bad)
        lines.append(f"  {MARK[first.status]:4}  {task}{ex}.{name}  (fails at world size {where})")
        phase = f", phase {first.phase}" if first.phase else ""
        said = first.message if verbose else plain(first.message)    # -v: the transport's own words
        lines.append(f"        world size {first.world_size}{phase}: {said}")
        if first.details.get("where"):
            lines.append("        in your code:\n" + _indent(first.details["where"], 10))
        if first.hint:
            lines.append(f"        hint: {first.hint}")
        if where_taught(first):
            lines.append(f"        read: {where_taught(first)}")
        if first.details.get("vs_reference"):
            lines.append(f"        reference: {first.details['vs_reference']}")
        if first.details.get("printed"):
            if verbose:
                for r, said in sorted(first.details["printed"].items()):
                    lines.append(f"        rank {r} printed (last lines):\n" + _indent(said, 10))
            else:
                lines.append("        (your code printed something: -v shows each rank's last lines)")
        if verbose and first.details.get("transport"):
            lines.append(f"        the transport said: {first.details['transport']}")
        if verbose and first.details.get("stacks"):
            for r, st in sorted(first.details["stacks"].items()):
                lines.append(f"        stack of rank {r}:\n" + _indent(st, 10))
    lines.append("")
    lines.append(summary_table(results))
    ran = sorted({r.details.get("confinement") for r in results} - {None, ""})
    if ran and confinement:
        lines.append(f"  code under test ran {' / '.join(ran)}")
    return "\n".join(lines)


_STUB = re.compile(r"^not implemented yet: (?:\[(E\d+\.\d+)\] ([A-Za-z_]\w*)(?:\.\w+)?: )?")


def _todo(r: Result) -> str:
    """'not implemented yet (task ...). Hint: ...' for a check whose own function is a stub;
    where the stub that raised is another task's function (the check of E6.2 runs E3's
    parallelize_transformer, ring_attention_backward's runs the forward first), that function,
    named with its task: the check's own function may be written already."""
    found = _STUB.match(r.message)
    hint = r.message[found.end():] if found else r.message
    stub_task, stub = (found.group(1), found.group(2)) if found else (None, None)
    if stub_task and stub_task != r.task:
        module = next((e.module for e in course.COURSE for t in e.tasks if t.id == stub_task), "")
        taught = course.where_taught(module, stub) if module else ""
        return (f"it runs {module + '.' if module else ''}{stub}, not implemented yet"
                f"{f' ({taught})' if taught else ''}: implement that first. Its hint: {hint}")
    read = f" ({where_taught(r)})" if where_taught(r) else ""
    keep = f"{stub}: " if stub else ""
    return f"not implemented yet{read}. Hint: {keep}{hint}"


def summary(results):
    """{exercise: (passed checks, total checks, not implemented, not graded: machine busy)}."""
    out = OrderedDict()
    for (ex, _), rs in by_check(results).items():
        p, t, todo, busy = out.get(ex, (0, 0, 0, 0))
        ok = all(r.passed for r in rs)
        out[ex] = (p + ok, t + 1, todo + any(r.status == Verdict.NOTIMPL for r in rs),
                   busy + (not ok and all(r.passed or r.status in NOT_GRADED for r in rs)))
    return out


def not_graded(results) -> int:
    """Checks (at some world size) not graded (the machine too busy, or no budget left to run
    them): run them again."""
    return sum(r.status in NOT_GRADED for r in results)


def summary_table(results) -> str:
    rows = ["  exercise          checks passed   status", "  " + "-" * 44]
    for ex, (p, t, todo, busy) in summary(results).items():
        word = "ok" if p == t else ("not implemented yet" if todo == t else
                                    "not graded: machine busy, run it again" if p + busy == t
                                    else "needs work")
        rows.append(f"  {ex:<17} {p:>3} / {t:<3}       {word}")
    return "\n".join(rows)


def to_json(results: list[Result], review=()) -> dict:
    exercises = OrderedDict()
    for r in results:
        ex = exercises.setdefault(r.exercise, {"passed": True, "checks": []})
        ex["passed"] &= r.passed
        ex["checks"].append({"name": r.check, "task": r.task, "world_size": r.world_size, "passed": r.passed,
                             "status": r.status, "phase": r.phase, "rank": r.rank, "key": r.key,
                             "message": r.message, "hint": r.hint,
                             "where": r.details.get("where", ""),
                             "vs_reference": r.details.get("vs_reference", ""),
                             "not_run_after": r.not_run_after})
    passed = all(r.passed for r in results) and bool(results)
    s = summary(results)
    exercises = _visible_strings(exercises)
    return {"passed": passed, "exercises": exercises, "review": _visible_strings(list(review)),
            "confinement": sorted({r.details.get("confinement") for r in results} - {None, ""}),
            "not_graded": not_graded(results),
            "summary": "; ".join(f"{ex} {p}/{t}" for ex, (p, t, _, _) in s.items())}


def write_json(results, path, review=()) -> None:
    """The report as JSON; `review`: what the instructor should look at (a list of
    {"file", "line", "reason", "code"}, empty when there is nothing)."""
    with open(path, "w") as fh:
        json.dump(to_json(results, review), fh, indent=2)


def _indent(s: str, n: int) -> str:
    return "\n".join(" " * n + line for line in s.rstrip().splitlines())
