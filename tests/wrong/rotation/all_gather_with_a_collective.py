r"""ring_all_gather calls dist.all_gather_into_tensor instead of rotating: the right numbers,
but the exercise is to build it from rotations.

EXPECT: ring_all_gather .*1 collective call\(s\), expected exactly 0; seen: all_gather_into_tensor at rotation\.py.*rule 'Point-to-point only'
CLASS: traffic
RULE: Point-to-point only
WORLD_SIZES: 2
ONLY: ring_all_gather
"""

# The bug, as edits of the reference solution (solutions/rotation.py):
EDITS = {
    "ring_all_gather": [
        (r'''    world, rank = dist.get_world_size(group), dist.get_rank(group)
    parts = [None] * world
    parts[rank] = current = tensor.detach()
    for k in range(1, world):
        current = rotate(current, "clockwise", group)
        parts[(rank - k) % world] = current
    return torch.cat(parts, dim=dim)
''',
         r'''    world = dist.get_world_size(group)
    x = tensor.detach().movedim(dim, 0).contiguous()
    out = x.new_empty((world * x.shape[0], *x.shape[1:]))
    dist.all_gather_into_tensor(out, x, group=group)
    return out.movedim(0, dim).contiguous()
'''),
    ],
}
