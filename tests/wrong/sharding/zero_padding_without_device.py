r"""The padding zeros are made with torch.zeros(extra, dtype=...) and no device: on a GPU run
they are in CPU memory, where torch.cat refuses to join them to the GPU gradient (on CPU
every tensor is on the same device, so only the rule 'Device' shows it).

EXPECT: sharding\.ShardedOptimizer .*made without a device .*rule 'Device'
CLASS: device
RULE: Device
WORLD_SIZES: 2
ONLY: ShardedOptimizer
"""

# The bug, as edits of the reference solution (solutions/sharding.py):
EDITS = {
    "padded": [
        (r'''    return F.pad(flat, (0, extra)) if extra else flat
''',
         r'''    return torch.cat([flat, torch.zeros(extra, dtype=flat.dtype)]) if extra else flat
'''),
    ],
}
