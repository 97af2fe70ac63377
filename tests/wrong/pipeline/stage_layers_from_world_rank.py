r"""stage_layers takes r from the WORLD (dist.get_rank()) and N from the group (student
walk-through M40): right on the world group, wrong on any other.

EXPECT: stage_layers.*group of ranks 1\.\.3 L=4: rank 1, .*of stage 0 is \(1, 2\), expected \(0, 1\).*rule 'Group'
CLASS: subgroup
WORLD_SIZES: 4
ONLY: stage_layers

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "stage_layers": [
        (r'''    world, rank = dist.get_world_size(group), dist.get_rank(group)''',
         r'''    world, rank = dist.get_world_size(group), dist.get_rank()'''),
    ],
}
