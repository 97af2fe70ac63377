r"""ParallelSelfAttention keeps the global head count H on every rank instead of H/N: its E/N columns are cut into H heads too small.

EXPECT: FAIL  \[E3\.5\] tensor_parallel\.ParallelSelfAttention .*forward/output.*hint: per local head: softmax\(q k\^T / sqrt\(d\)\) v with d = E/H the serial head dim \(NOT E/N\), q/k/v viewed as \[B, S, H/N, d\]
CLASS: values
WORLD_SIZES: 2
ONLY: ParallelSelfAttention
RULE: Results

A wrong implementation: solutions/tensor_parallel.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/tensor_parallel.py):
EDITS = {
    "ParallelSelfAttention.__init__": [
        (r'''        self.local_heads = _divide(name, "num_heads", num_heads, self.tp_size)
''',
         r'''        _divide(name, "num_heads", num_heads, self.tp_size)
        self.local_heads = num_heads
'''),
    ],
}
