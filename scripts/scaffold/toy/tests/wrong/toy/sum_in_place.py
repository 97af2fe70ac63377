r"""total all-reduces the caller's x in place, and returns it.

EXPECT: total/x after
SAYS: toy.total:total/x after
CLASS: in-place values
WORLD_SIZES: 2
"""

EDITS = {
    "total": [
        (r'''    out = x.clone()
''',
         r'''    out = x
'''),
    ],
}
