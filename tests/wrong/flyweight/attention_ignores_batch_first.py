r"""The wrapped attention always reads sequence-first input, whatever the module's batch_first says.

EXPECT: \[E5\.2\] flyweight\.MultiheadAttention_batch_first .*phase forward.*hint: the wrapped attention takes what nn\.MultiheadAttention takes.*batch_first=True
CLASS: values batch-first
WORLD_SIZES: 2
ONLY: MultiheadAttention MultiheadAttention_batch_first

A wrong implementation: the stub's design (solutions/flyweight.py up to its faster design) with this one bug.
"""

BASE = "simple"

# The bug, as edits of the stub's design (solutions/flyweight.py up to its faster design):
EDITS = {
    "FlyweightWrapper._attention": [
        (r'''        if m.batch_first:
            q, k, v = query, key, value
        else:
            q, k, v = (t.transpose(0, 1) for t in (query, key, value))
''',
         r'''        q, k, v = (t.transpose(0, 1) for t in (query, key, value))
'''),
        (r'''        return (out if m.batch_first else out.transpose(0, 1)), None
''',
         r'''        return out.transpose(0, 1), None
'''),
    ],
}
