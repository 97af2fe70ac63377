r"""Forward rotates clockwise but takes the block in hand at step i for rank (r + i) % N's, the
backward's formula: the same at two ranks, a wrong causal case at three or four.

EXPECT: ring_attention_causal.*world size 3.*causal forward/output .*it equals what the block in hand at step i taken for rank \(r \+ i\) % N's while k and v rotate CLOCKWISE \(it is \(r - i\) % N's\).*gives.*at forward step i it holds rank s = \(r - i\) % N's
CLASS: 3-4-ranks off-by-one
WORLD_SIZES: 2 3
ONLY: ring_attention_causal
"""

# The bug, as edits of the reference solution (solutions/context_parallel.py):
EDITS = {
    "ring_attention_forward": [
        (r'''        s = (rank - i) % world                                   # whose block is in hand
''',
         r'''        s = (rank + i) % world                                   # whose block is in hand
'''),
    ],
}
