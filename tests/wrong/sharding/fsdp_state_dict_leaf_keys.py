r"""full_state_dict names each parameter by its unit and its LEAF name ('layers.0.weight'),
losing the submodule inside the unit ('layers.0.fc.weight'): the keys are not the serial
module's, and a unit's two `weight`s collide.

EXPECT: sharding\.FullyShardedDataParallel .*full_state_dict/layers\.0\.\w+\.weight.*hint: full_state_dict\(\).*the parameter's name INSIDE the unit
CLASS: nested
WORLD_SIZES: 2
ONLY: FullyShardedDataParallel
"""

# The bug, as edits of the reference solution (solutions/sharding.py):
EDITS = {
    "FullyShardedDataParallel.full_state_dict": [
        (r'''            for (qualified, _, _, shape), piece in zip(unit.slots, unit.pieces(full)):
                state[f"{unit.name}.{qualified}"] = piece.view(shape).clone()
''',
         r'''            for (_, _, leaf, shape), piece in zip(unit.slots, unit.pieces(full)):
                state[f"{unit.name}.{leaf}"] = piece.view(shape).clone()
'''),
    ],
}
