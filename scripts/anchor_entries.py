"""Rewrite tests/wrong and tests/correct entries from text edits of the whole module (REPLACE) to
edits scoped to the definitions they change (EDITS), so a refactoring of the reference elsewhere
keeps them applying (tests/helpers/wrongs.py reads both forms).

    python scripts/anchor_entries.py                      # every entry of tests/wrong, tests/correct
    python scripts/anchor_entries.py tests/wrong/pipeline tests/correct/experts/an_entry.py
    python scripts/anchor_entries.py --check tests/wrong   # say what it would do, write nothing

For each entry whose last statement is a literal `REPLACE` list, each (old, new) pair is keyed on
the innermost definition whose source (decorators included) holds its one match, method before
class before top-level function: `Class.method`, `Class` or `function` (`Name#1` for the first of
a name defined twice, solutions/flyweight.py), the first of them where `old` occurs exactly once.
A pair no definition holds (an import, a module constant, text between definitions) stays in
REPLACE, applied after EDITS. The entry is written only if the new form builds, byte for byte,
the text its REPLACE built (and the file written reads back to it); else it stays as it was and
the reason is printed. The docstring and the comments above REPLACE are kept. Re-running is safe:
entries already holding EDITS, or no REPLACE, are left alone.
"""
from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "helpers"))
import wrongs  # noqa: E402  (tests/helpers/wrongs.py: the loader of both forms)

FOLDERS = [ROOT / "tests" / "wrong", ROOT / "tests" / "correct"]


class Textual(Exception):
    """The entry stays REPLACE; the message says why."""


def _keys(body: list, prefix: str = "") -> list:
    """[(key, node)] of a scope's definitions: a name's last definition (the one in effect) under
    its name, an earlier one as `name#1`, `name#2` (wrongs.definition)."""
    total, seen, out = {}, {}, []
    for n in body:
        if isinstance(n, wrongs.DEFINITIONS):
            total[n.name] = total.get(n.name, 0) + 1
    for n in body:
        if isinstance(n, wrongs.DEFINITIONS):
            seen[n.name] = seen.get(n.name, 0) + 1
            last = seen[n.name] == total[n.name]
            out.append((prefix + (n.name if last else f"{n.name}#{seen[n.name]}"), n))
    return out


def holders(source: str, old: str) -> list:
    """The keys of the definitions holding the one match of `old` in `source`, innermost first
    (`Class.method`, then `Class`; or a function)."""
    tree = ast.parse(source)
    at = source.index(old)
    chain, body, prefix = [], tree.body, ""
    while body:
        for key, node in _keys(body, prefix):
            start, end = wrongs.span(source, key)
            if start <= at and at + len(old) <= end:
                chain.append(key)
                # a class's methods are keys; a function's inner functions are not
                body = node.body if isinstance(node, ast.ClassDef) else []
                prefix = key + "."
                break
        else:
            break
    return chain[::-1]


def key_of(source: str, old: str, base: str) -> str | None:
    """The innermost definition holding `old`'s match in `source` where it occurs exactly once,
    and which `base` defines too; None where there is none (the pair stays REPLACE)."""
    for key in holders(source, old):
        start, end = wrongs.span(source, key)
        if source[start:end].count(old) == 1 and wrongs.span(base, key) is not None:
            return key
    return None


def trimmed(old: str, new: str) -> list:
    """The pair less the whole lines `old` and `new` end with, begin with, or both (`old` kept
    non-empty): an edit written with the blank lines or the header of the next definition is
    the same edit inside its own definition, where the trimmed `old` still occurs once."""
    o, n = old.splitlines(keepends=True), new.splitlines(keepends=True)
    head = tail = 0
    while head < min(len(o), len(n)) - 1 and o[head] == n[head]:
        head += 1
    while tail < min(len(o), len(n)) - 1 and o[-1 - tail] == n[-1 - tail]:
        tail += 1
    out = []
    for h, t in ((0, tail), (head, 0), (head, tail)):
        if len(o) - h - t > 0 and (h or t):
            out.append(("".join(o[h:len(o) - t]), "".join(n[h:len(n) - t])))
    return out


def _adds_top_level(old: str, new: str) -> bool:
    """Whether `new` writes module-level code `old` did not (a new global or function)."""
    top = lambda t: [ln for ln in t.splitlines() if ln[:1].strip() and ln[:1] != "#"]  # noqa: E731
    return len(top(new)) > len(top(old))


def scoped(base: str, pairs: list, who: str = "an entry") -> tuple[dict, list]:
    """(EDITS, the REPLACE pairs left) that build from `base` the very text `pairs` build."""
    if not pairs:
        raise Textual("REPLACE is empty: the entry is its base itself")
    built = wrongs.replace(base, pairs, who)
    source, keyed, pairs = base, [], list(pairs)
    for i, (old, new) in enumerate(pairs):
        try:
            key = key_of(source, old, base)
            for o, n in trimmed(old, new) if key is None else []:   # held once trimmed?
                if source.count(o) == 1 and not _adds_top_level(o, n):
                    key = key_of(source, o, base)
                    if key:
                        pairs[i] = (o, n)
                        break
        except SyntaxError:                      # an earlier edit left no valid module
            key = None
        keyed.append((key, i))
        source = source.replace(old, new)
    # a class and one of its methods both named: the class takes the method's pairs
    keys = {k for k, _ in keyed if k}
    keyed = [(next((c for c in keys if k and k.startswith(c + ".")), k), i) for k, i in keyed]
    edits = {}
    for key, i in keyed:
        if key:
            edits.setdefault(key, []).append(pairs[i])
    left = [pairs[i] for key, i in keyed if key is None]
    if not edits:
        raise Textual("every edit is of module-level text (no definition holds it)")
    try:
        again = wrongs.replace(wrongs.scoped(base, edits, who), left, who)
    except AssertionError as why:
        raise Textual(f"EDITS do not build: {str(why).splitlines()[0]}") from None
    if again != built:
        raise Textual("EDITS build other text than REPLACE")
    return edits, left


def _literal(text: str):
    """The entry's REPLACE list and its node, or (None, None) where there is none or it already
    holds EDITS; Textual where REPLACE is computed or not the last statement."""
    tree = ast.parse(text)
    assigns = {t.id: n for n in tree.body if isinstance(n, ast.Assign)
               for t in n.targets if isinstance(t, ast.Name)}
    if "EDITS" in assigns or "REPLACE" not in assigns:
        return None, None
    node = assigns["REPLACE"]
    if node is not tree.body[-1]:
        raise Textual("REPLACE is not the entry's last statement")
    try:
        return ast.literal_eval(node.value), node
    except ValueError:
        raise Textual("REPLACE is computed, not literal: convert it by hand") from None


def _quote(text: str) -> str:
    """`text` as a raw triple-quoted literal, as the entries wrote their edits."""
    for q in ("'''", '"""'):
        if q not in text and not text.endswith(q[0]) and "\\" not in text[-1:]:
            return f"r{q}{text}{q}"
    return repr(text)


def _pairs(pairs: list, indent: str) -> str:
    return "".join(f"{indent}({_quote(o)},\n{indent} {_quote(n)}),\n" for o, n in pairs)


def render(edits: dict, left: list) -> str:
    out = "EDITS = {\n" + "".join(f"    \"{k}\": [\n{_pairs(v, '        ')}    ],\n"
                                  for k, v in edits.items()) + "}\n"
    if left:
        out += ("# edits of module-level text, applied after EDITS:\n"
                f"REPLACE = [\n{_pairs(left, '    ')}]\n")
    return out


def convert(path: Path, write: bool = True) -> str:
    """Scope one entry's edits; what happened, in words."""
    text = path.read_text()
    try:
        pairs, node = _literal(text)
        if pairs is None:
            return "kept: already scoped, or no REPLACE"
        base, where = wrongs.base_of(path)
        before = wrongs.replace(base, pairs, str(path), where)
        edits, left = scoped(base, pairs, str(path))   # builds `before` to the letter
    except Textual as why:
        return f"textual: {why}"
    if write:
        path.write_text("".join(text.splitlines(keepends=True)[:node.lineno - 1])
                        + render(edits, left))
        if wrongs.build(path) != before:          # the file as written, read back
            path.write_text(text)
            return "textual: the written entry builds other text; restored"
    return "scoped" + (f" ({len(left)} edit(s) of module-level text kept in REPLACE)" if left else "")


def entries(targets: list) -> list:
    out = []
    for t in targets:
        t = Path(t).resolve()
        if not t.exists():
            sys.exit(f"anchor_entries: no such entry or folder: {t}")
        out += [t] if t.is_file() else sorted(p for p in t.rglob("*.py") if not p.name.startswith("_")
                                              and p.parent.name != "__pycache__")
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("targets", nargs="*", help="entry files or folders (default: tests/wrong, "
                                              "tests/correct)")
    p.add_argument("--check", action="store_true", help="write nothing, say what would change")
    a = p.parse_args(argv)
    counts = {}
    for path in entries(a.targets or FOLDERS):
        said = convert(path, write=not a.check)
        kind = said.split(":")[0].split(" (")[0]
        counts[kind] = counts.get(kind, 0) + 1
        if not said.startswith("kept"):
            print(f"{path.relative_to(ROOT)}: {said}")
    print(", ".join(f"{v} {k}" for k, v in sorted(counts.items())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
