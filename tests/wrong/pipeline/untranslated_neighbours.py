r"""The neighbours are group ranks r - 1 and r + 1, never translated to global ranks.

EXPECT: subgroup.*rank 0 raised ValueError: Global rank 1 is not part of group.*rule .Group.: r and N are the GROUP rank
CLASS: subgroup
RULE: Group
WORLD_SIZES: 3
ONLY: subgroup PipelineStage

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "PipelineStage.__init__": [
        (r'''        self.prev = None if self.is_first else dist.get_global_rank(group, rank - 1) \
            if group is not None else rank - 1
        self.next = None if self.is_last else dist.get_global_rank(group, rank + 1) \
            if group is not None else rank + 1
''',
         r'''        self.prev = None if self.is_first else rank - 1
        self.next = None if self.is_last else rank + 1
'''),
    ],
}
