r"""total divides the sum by the world size: a mean where the sum is wanted.

EXPECT: total/output
SAYS: value.world-divided
CLASS: values 3-4-ranks
WORLD_SIZES: 2 3
"""

EDITS = {
    "total": [
        (r'''    return out
''',
         r'''    return out / dist.get_world_size(group)
'''),
    ],
}
