r"""Takes the shard in hand for the experts of this rank's own shard: the wrong experts' weights.

EXPECT: flyweight\.MoE .*phase forward: rank \d raised.*in partial.*forward step i holds the experts of shard s = \(r - i\) % N
CLASS: off-by-one
WORLD_SIZES: 2
ONLY: MoE

A wrong implementation: the stub's design (solutions/flyweight.py up to its faster design) with this one bug.
"""

BASE = "simple"

# this rank's experts' keys read the shard in hand, where they are empty: a shape error.
EDITS = {
    "FlyweightWrapper._experts": [
        (r'''                 "experts": [range(a, a + z) for a, z in zip(self.starts, self.sizes)]}
''',
         r'''                 "experts": [range(self.starts[self.rank], self.starts[self.rank]
                                   + self.sizes[self.rank])] * self.world}
'''),
    ],
}
