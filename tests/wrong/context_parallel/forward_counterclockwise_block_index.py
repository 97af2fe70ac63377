r"""Forward rotates k and v COUNTERCLOCKWISE (allowed) but keeps the clockwise formula for the
block in hand, s = (r - i) % N: the same at two ranks, a wrong causal case at three or four.

EXPECT: ring_attention_causal.*world size 3.*causal forward/output .*it equals what the block in hand at step i taken for rank \(r \+ i\) % N's while k and v rotate CLOCKWISE .*, or for \(r - i\) % N's while they rotate COUNTERCLOCKWISE gives.*rotating COUNTERCLOCKWISE \(from r\+1\) it holds rank \(r \+ i\) % N's
CLASS: 3-4-ranks direction
WORLD_SIZES: 2 3
ONLY: ring_attention_causal
"""

# The bug, as edits of the reference solution (solutions/context_parallel.py):
EDITS = {
    "ring_attention_forward": [
        (r'''            incoming = (rotate_async(k, "clockwise", group), rotate_async(v, "clockwise", group))
        if not causal:
''',
         r'''            incoming = (rotate_async(k, "counterclockwise", group),
                        rotate_async(v, "counterclockwise", group))
        if not causal:
'''),
    ],
}
