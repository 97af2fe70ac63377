r"""Backward keeps one gradient accumulator per layer and writes this batch's part into it
before waiting for the one arriving ("compute while it arrives"): that buffer is still being
sent to the next rank, which then receives a mix (gloo often copies early and hides it).

EXPECT: the buffer of the (isend|send) to rank \d at rotation\.py:\d+ in rotate_async, called from flyweight\.py:\d+ in _rotating_backward was written to before its work was waited.*hint: rule 'Send buffers'
CLASS: in-place send-buffer
RULE: Send buffers
WORLD_SIZES: 2
ONLY: Linear
"""
BASE = "simple"

# The bug, as edits of the stub's design (solutions/flyweight.py up to its faster design):
EDITS = {
    "FlyweightWrapper._rotating_backward": [
        (r'''            acc = d_shard if sending is None else sending.wait() + d_shard
''',
         r'''            if sending is None:
                self._acc = d_shard.clone()          # one accumulator buffer per layer
            else:
                self._acc.copy_(d_shard)             # this batch's part first ...
                self._acc.add_(sending.wait())       # ... then what arrived
            acc = self._acc
'''),
    ],
}
