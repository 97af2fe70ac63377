r"""Split keeps S // N entries per rank without checking that N divides S: the last S % N are dropped.

EXPECT: Split_uneven_size.*forward/Split of a size N does not divide raises is 'nothing', expected 'ValueError'.*raise ValueError naming the\s+sizes
CLASS: uneven
WORLD_SIZES: 2
ONLY: Split_uneven_size
HIDDEN: yes
"""

# The bug, as edits of the reference solution (solutions/comm.py):
REPLACE = [
    (r'''        if x.shape[dim] % world:
            raise ValueError(f"split: size {x.shape[dim]} of dim {dim} is not divisible by the world size {world}")
''',
     r''''''),
]
