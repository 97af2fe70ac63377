r"""FullyShardedDataParallel never frees a unit after its forward, and backward gathers a unit
only if it was freed: nothing is gathered again in backward. At 4 ranks, where no storage is
counted, the report must still lead with rule 'Memory', not with the Overlap it also breaks.

EXPECT: sharding\.FullyShardedDataParallel +\(fails at world size 3, 4\)\s+world size 4, phase backward: rank \d, backward/bytes of this rank's shards all-gathered again is 0, expected at least \d+.*hint: rule 'Memory': after forward a rank holds at most two gathered units.*free each unit's gathered storage in its forward hook
CLASS: memory
WORLD_SIZES: 3 4
ONLY: FullyShardedDataParallel
"""

# The bug, as edits of the reference solution (solutions/sharding.py): as the student wrote
# it, the forward hook does nothing; the backward pre-hook's gather is skipped for a unit that
# is still gathered (the reference's `ready`).
EDITS = {
    "_Unit._after_forward": [
        (r'''    def _after_forward(self, module, args, output):
        self.free()
''',
         r'''    def _after_forward(self, module, args, output):
        pass
'''),
    ],
}
