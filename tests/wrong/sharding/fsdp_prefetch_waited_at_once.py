r"""FullyShardedDataParallel posts the next unit's all-gather in the forward pre-hook, and
waits for it right there, before the current unit computes: a prefetch that hides nothing.

EXPECT: sharding\.FullyShardedDataParallel .*forward/units gathered while the previous unit computed is 0, expected at least \d.*rule 'Overlap'
CLASS: overlap
RULE: Overlap
WORLD_SIZES: 2
ONLY: FullyShardedDataParallel
"""

# The bug, as edits of the reference solution (solutions/sharding.py):
EDITS = {
    "_Unit._before_forward": [
        (r'''            nxt.post_gather()                            # prefetch: travels while we compute
''',
         r'''            nxt.wait_gathered()
'''),
    ],
}
