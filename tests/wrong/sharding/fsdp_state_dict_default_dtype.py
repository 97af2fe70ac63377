r"""full_state_dict allocates each full tensor with torch.empty(shape, device=...) without
dtype=: float32, the default dtype, whatever the model's.

EXPECT: sharding\.FullyShardedDataParallel .*full_state_dict/\S+ has dtype float32, expected float64.*hint: rule 'Dtypes'
CLASS: dtype
RULE: Dtypes
WORLD_SIZES: 2
ONLY: FullyShardedDataParallel
"""

# The bug, as edits of the reference solution (solutions/sharding.py):
EDITS = {
    "FullyShardedDataParallel.full_state_dict": [
        (r'''                state[f"{unit.name}.{qualified}"] = piece.view(shape).clone()
''',
         r'''                state[f"{unit.name}.{qualified}"] = torch.empty(
                    shape, device=piece.device).copy_(piece.view(shape))
'''),
    ],
}
