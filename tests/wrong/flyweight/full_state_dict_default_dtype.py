r"""full_state_dict allocates each full tensor with torch.empty(shape, device=...), without
dtype=: float32, the default dtype, whatever the model's.

EXPECT: flyweight\.FlyweightWrapper .*full_state_dict/weight has dtype float32, expected float64.*hint: rule 'Dtypes'
CLASS: dtype
RULE: Dtypes
WORLD_SIZES: 2
ONLY: FlyweightWrapper
"""
BASE = "simple"

# The bug, as edits of the stub's design (solutions/flyweight.py up to its faster design):
EDITS = {
    "FlyweightWrapper.full_state_dict": [
        (r'''        full = {key: shard.new_empty(shape) for key, shape in self.full_shapes.items()}
''',
         r'''        full = {key: torch.empty(shape, device=shard.device)
                for key, shape in self.full_shapes.items()}
'''),
    ],
}
