r"""Receivers allocate incoming shards with their own shard's shape (breaks with uneven shards).

EXPECT: flyweight\.Conv2d .*phase full_state_dict: rank \d (raised RuntimeError.*recv_shape|crashed.*the shape of the shard that arrives|raised RelayError: a send and its receive buffer differ in size: rank \d sent rank \d 18 elements.*receive buffer holds 36.*hint:.*the shape of the shard that arrives)
CLASS: uneven
WORLD_SIZES: 3
ONLY: Conv2d

A wrong implementation: the stub's design (solutions/flyweight.py up to its faster design) with this one bug.
"""

# The bug, as edits of the stub's design (solutions/flyweight.py up to its faster design):
BASE = "simple"
EDITS = {
    "FlyweightWrapper._rotating_forward": [
        (r'''                                                 recv_shape=(self._numel((s - 1) % world),))
''',
         r'''                                                 recv_shape=None)
'''),
    ],
    "FlyweightWrapper._rotating_backward": [
        (r'''                                                 recv_shape=(self._numel((s + 1) % world),))
''',
         r'''                                                 recv_shape=None)
'''),
        (r'''            sending = rotation.rotate_async(acc, "counterclockwise", self.group,
                                            recv_shape=(self._numel((s + 1) % world),))
            del acc
''',
         r'''            sending = rotation.rotate_async(acc, "counterclockwise", self.group,
                                            recv_shape=None)
            del acc
'''),
    ],
    "FlyweightWrapper.full_state_dict": [
        (r'''                                        recv_shape=(self._numel(s),))
''',
         r'''                                        recv_shape=None)
'''),
    ],
}
