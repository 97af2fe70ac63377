r"""Forward keeps a copy of every shard it saw, for backward to reuse ("saves rotating them again"); backward clears the cache, so nothing is left after a step, but between forward and backward every rank holds the whole layer.

EXPECT: \[E5\.2\] flyweight\.TransformerLM .*forward/bytes held after forward besides activations is \d+, expected at most .*hint: rule 'Memory': after forward the rank holds tensors besides its parameters
CLASS: memory
WORLD_SIZES: 2
ONLY: TransformerLM

A wrong implementation: the stub's design (solutions/flyweight.py up to its faster design) with this one bug.
"""

BASE = "simple"

# The bug, as edits of the stub's design (solutions/flyweight.py up to its faster design):
EDITS = {
    "FlyweightWrapper._rotating_forward": [
        (r'''            y = self.kind.partial(self.module, inputs, self._unpack(shard, s), s, extra)
            if cat:
''',
         r'''            y = self.kind.partial(self.module, inputs, self._unpack(shard, s), s, extra)
            self.__dict__.setdefault("_cache", {})[s] = shard.detach().clone()  # for backward
            if cat:
'''),
    ],
    "FlyweightWrapper._rotating_backward": [
        (r'''        world, rank = self.world, self.rank
        grad_inputs = [None] * len(inputs)
        shard, sending = self._own_flat(), None
''',
         r'''        world, rank = self.world, self.rank
        grad_inputs = [None] * len(inputs)
        shard, sending = self._own_flat(), None
        self.__dict__.pop("_cache", None)   # used up
'''),
    ],
}
