r"""Shards sized like torch.chunk (ceil(U/N) each, the last one short) instead of
torch.tensor_split: 10 units on 4 ranks become 3, 3, 3, 1, not 3, 3, 2, 2.

EXPECT: phase structure: rank \d, structure/.* shard is .*expected .*cut like torch.tensor_split, sizes\[s\] = U // N \+ \(1 if s < U % N else 0\)
CLASS: uneven
WORLD_SIZES: 3 4
RULE: Layout
"""
EDITS = {
    "_split_sizes": [
        (r'''    return [units // world + (1 if s < units % world else 0) for s in range(world)]''',
         r'''    size = -(-units // world)
    return [max(0, min(size, units - s * size)) for s in range(world)]'''),
    ],
}
