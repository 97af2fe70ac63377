r"""ring_all_gather returns the caller's tensor itself when there is one rank ("nothing to
gather"): an alias of the input.

EXPECT: ring_all_gather .*\(fails at world size 1\).*returned a new tensor, not the input or a view of it is False, expected True.*rule 'New tensors'
CLASS: in-place one-rank-alias
WORLD_SIZES: 1
ONLY: ring_all_gather
"""

# The bug, as edits of the reference solution (solutions/rotation.py):
EDITS = {
    "ring_all_gather": [
        (r'''    world, rank = dist.get_world_size(group), dist.get_rank(group)
    parts = [None] * world
''',
         r'''    world, rank = dist.get_world_size(group), dist.get_rank(group)
    if world == 1:
        return tensor
    parts = [None] * world
'''),
    ],
}
