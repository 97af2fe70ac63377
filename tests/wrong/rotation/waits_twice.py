r"""wait() keeps the works and waits on them again when called twice (gloo can block on a finished work).

EXPECT: \[E4.2\] rotation\.wait_twice .*phase second wait.*work already waited.*hint: a point-to-point work was waited a second time.*wait on each work once and forget it
CLASS: deadlock
WORLD_SIZES: 2
ONLY: wait_twice

A wrong implementation: solutions/rotation.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/rotation.py):
REPLACE = [
    (r'''        self._works, self._sent = [], None  # never wait twice: gloo can block on a finished work
''',
     r'''        self._sent = None
'''),
]
