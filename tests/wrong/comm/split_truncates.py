r"""Split keeps S // N entries per rank without checking that N divides S: the last S % N are dropped.

EXPECT: FAIL  \[E2\.2\] comm\.Split .*uneven size/Split of a size N does not divide raises is 'nothing', expected 'ValueError'.*rule 'Raises'
CLASS: uneven
WORLD_SIZES: 2
ONLY: Split
HIDDEN: no
RULE: Raises
"""

# The bug, as edits of the reference solution (solutions/comm.py):
EDITS = {
    "Split.forward": [
        (r'''        if x.shape[dim] % world:
            raise ValueError(f"split: size {x.shape[dim]} of dim {dim} is not divisible by the world size {world}")
''',
         r''''''),
    ],
}
