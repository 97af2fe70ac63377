r"""PipelineStage's is_first compares the WORLD rank with 0, not the group rank (student
walk-through M39): right on the world group, wrong on a group without rank 0.

EXPECT: PipelineStage.*group of ranks 1\.\.2 construct.*rank 1.*rule 'Group'.*is_first is group rank 0
CLASS: subgroup
WORLD_SIZES: 3
ONLY: PipelineStage

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "PipelineStage.__init__": [
        (r'''        self.is_first, self.is_last = rank == 0, rank == world - 1''',
         r'''        self.is_first, self.is_last = dist.get_rank() == 0, rank == world - 1'''),
    ],
}
