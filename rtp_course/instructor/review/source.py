"""A submitted module's text as Python reads it, and whether it declares another encoding.

Python decodes a source file by its PEP 263 declaration (`# -*- coding: utf-7 -*-` on one of
its first two lines, or a UTF-8 byte-order mark): a file read as UTF-8 by an editor, a diff or
the review may say one thing while Python runs another (in UTF-7, `+AAo-` inside a comment is a
newline, so one "comment" line can hold a whole module). Whatever reads a submission's code
(the scan, the similarity's fingerprints, the collector's warning) reads it as Python does,
and a declaration of anything but UTF-8 is itself a finding: honest exercise code never needs
one.
"""
from __future__ import annotations

import codecs
import io
import re
import tokenize

# PEP 263's declaration, as the tokenizer looks for it (a comment on one of the first two lines).
_COOKIE = re.compile(rb"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)")
_UTF8 = {"utf-8", "utf-8-sig"}


def declared(data: bytes) -> tuple[int, str] | None:
    """(line, name) of an encoding other than UTF-8 that the first two lines of `data` declare
    (whether or not Python honours that line: a reader cannot tell), else None."""
    for number, line in enumerate(data.splitlines()[:2], 1):
        found = _COOKIE.match(line)
        if found:
            name = found.group(1).decode("ascii", "replace")
            try:
                if codecs.lookup(name).name in _UTF8:
                    continue
            except LookupError:
                pass
            return number, name
    return None


def python_text(data: bytes) -> str:
    """`data` decoded as Python decodes a module (its declaration or a BOM; UTF-8 otherwise),
    undecodable bytes replaced. A declaration Python refuses (an unknown codec, one that is not
    a text encoding: the module cannot be imported) leaves the UTF-8 reading."""
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO(data).readline)
        return data.decode(encoding, "replace")
    except (SyntaxError, LookupError, UnicodeError, ValueError):
        return data.decode("utf-8", "replace")


def finding(data: bytes) -> str | None:
    """What to tell an instructor about the encoding `data` declares; None for UTF-8."""
    found = declared(data)
    if found is None:
        return None
    line, name = found
    try:
        honoured = codecs.lookup(tokenize.detect_encoding(io.BytesIO(data).readline)[0])
        if not getattr(honoured, "_is_text_encoding", True):
            raise LookupError(name)
        python = (f"Python decodes the file as {name}, editors, diffs and readers as UTF-8: what "
                  f"they show need not be what runs" if honoured.name == codecs.lookup(name).name
                  else "Python ignores it there, a reader cannot tell")
    except (SyntaxError, LookupError, UnicodeError, ValueError):
        python = "Python refuses it: the module cannot be imported"
    return (f"line {line} declares the source encoding {name!r}: {python} (honest code never "
            f"declares one): read the file decoded as {name}")
