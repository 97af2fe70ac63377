"""Which names are a function's own: what tells run-time data (a parameter, a loop over the
model's parameters) from a name held at module level, and a method's `self` from other objects."""
from __future__ import annotations

import ast


def scopes(nodes):
    """For the nodes of one file (ast.walk's order, outer first): the names local to each node's
    function (parameters, assigned names; by id(node)), the name of `self` where that function
    (or one it is nested in) is a method of a class of the file's, and every name the file assigns."""
    local_names, self_name = {}, {}
    stored = {n.id for n in nodes if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    methods = {id(f) for c in nodes if isinstance(c, ast.ClassDef) for f in c.body}
    for fn in nodes:
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            continue
        inner = list(ast.walk(fn))
        names = {a.arg for a in inner if isinstance(a, ast.arg)}
        names |= {n.id for n in inner if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
        names -= {g for n in inner if isinstance(n, ast.Global) for g in n.names}
        me = self_name.get(id(fn))
        if id(fn) in methods and fn.args.args:
            me = fn.args.args[0].arg
        for sub in inner:
            local_names[id(sub)] = names
            self_name[id(sub)] = me
    return local_names, self_name, stored
