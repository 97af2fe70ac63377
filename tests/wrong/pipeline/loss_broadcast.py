r"""The last stage broadcasts the batch's loss to every rank, with a collective.

EXPECT: rank 0, M=6: 1 collective call\(s\), expected exactly 0; seen: broadcast.*rule 'Point-to-point only'
CLASS: traffic
RULE: Point-to-point only
WORLD_SIZES: 2
ONLY: gpipe

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
REPLACE = [
    (r'''            _exchange(stage, send=[(dx, stage.prev)])
    return loss


def one_f_one_b''',
     r'''            _exchange(stage, send=[(dx, stage.prev)])
    world = dist.get_world_size(group)
    shared = loss if stage.is_last else torch.empty((), dtype=inputs.dtype, device=inputs.device)
    dist.broadcast(shared, src=dist.get_global_rank(group, world - 1) if group is not None
                   else world - 1, group=group)
    return loss


def one_f_one_b'''),
]
