r"""Forward rotates k and v at every step, N times: the last rotation only brings the rank's own
block back.

EXPECT: forward: \d+ recv\|irecv call\(s\), expected between \d+ and \d+.*exactly once
CLASS: traffic
WORLD_SIZES: 2
ONLY: ring_attention
RULE: Communication
"""

# The bug, as edits of the reference solution (solutions/context_parallel.py):
EDITS = {
    "ring_attention_forward": [
        (r'''        if i < world - 1:                                        # start moving it on, THEN compute
''',
         r'''        if True:                                                 # start moving it on, THEN compute
'''),
    ],
}
