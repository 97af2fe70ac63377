r"""wait() polls is_completed() until the works are done, and never calls wait() on them.

gloo's point-to-point works only progress inside wait(): the poll spins for ever, with no
rank inside a communication call.

EXPECT: HANG +\[E4.2\] rotation\.rotate .*deadlock: the check did not finish within \d+ s.*was computing.*hint: no rank was inside a communication call.*polls is_completed\(\) without ever calling wait\(\)
CLASS: deadlock unwaited
WORLD_SIZES: 2
ONLY: rotate
"""

# The bug, as edits of the reference solution (solutions/rotation.py):
REPLACE = [
    (r'''        for w in self._works:
            w.wait()
''',
     r'''        while not all(w.is_completed() for w in self._works):
            pass
'''),
]
