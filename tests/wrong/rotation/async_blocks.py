r"""rotate_async waits for the transfer before returning (nothing can overlap it).

EXPECT: rotate_async/returned before the transfer was done \(ranks 1\.\.N-1\) is False, expected True.*Do not wait\(\) inside rotate_async
CLASS: overlap
WORLD_SIZES: 2
ONLY: rotate_async

A wrong implementation: solutions/rotation.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/rotation.py):
REPLACE = [
    (r'''    return RotationHandle(works, received, sent)
''',
     r'''    for w in works:
        w.wait()
    return RotationHandle([], received, sent)  # already complete
'''),
]
