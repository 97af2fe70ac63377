"""Shapes of syntax nodes that the scan asks about (no rule here: rules.py says what is flagged)."""
from __future__ import annotations

import ast

MAX_CHAIN = 64               # longest chain followed (bounds the work on a crafted file)


def const_str(node):
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def from_module(node: ast.ImportFrom):
    """The absolute module of a from-import; a relative one is taken from the exercise package
    (rtp_course, or rtp_impl when graded: the same rules); None above it."""
    if node.level == 0:
        return node.module
    if node.level == 1:
        return "rtp_course" + (f".{node.module}" if node.module else "")
    return None


def leftmost_str(node):
    """The constant a path expression starts with: '/proc/' of f'/proc/{pid}' or '/a' + b."""
    for _ in range(MAX_CHAIN):
        if isinstance(node, ast.BinOp):
            node = node.left
        elif isinstance(node, ast.JoinedStr) and node.values:
            node = node.values[0]
        else:
            return const_str(node)
    return None


def targets(node):
    """The assigned or deleted expressions of a statement, tuples unpacked."""
    todo = list(node.targets) if isinstance(node, (ast.Assign, ast.Delete)) else [node.target]
    out = []
    while todo:
        t = todo.pop()
        if isinstance(t, (ast.Tuple, ast.List)):
            todo += t.elts
        elif isinstance(t, ast.Starred):
            todo.append(t.value)
        else:
            out.append(t)
    return out


def class_of(node) -> bool:
    """type(x) or x.__class__: an object's class, which may be the grader's."""
    if isinstance(node, ast.Attribute):
        return node.attr == "__class__"
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "type" \
        and len(node.args) == 1
