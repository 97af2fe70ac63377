r"""Forward rotates each shard N times: the last rotation only brings the rank's own shard back.

EXPECT: forward: recv\|irecv call\(s\) moved \d+ bytes on this rank, expected between \d+ and \d+.*CLOCKWISE: .*every other shard once and no more
CLASS: traffic
WORLD_SIZES: 2
ONLY: Linear
RULE: Communication

A wrong implementation: solutions/flyweight.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/flyweight.py):
EDITS = {
    "FlyweightWrapper._rotating_forward": [
        (r'''            elif i < world - 1:
''',
         r'''            elif True:
'''),
    ],
}
