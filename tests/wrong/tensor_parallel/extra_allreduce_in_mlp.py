"""ParallelMLP all-reduces the hidden activation between fc1 and fc2, summing different hidden slices.

The column/row pair needs no communication in between; this extra all-reduce adds the
N different slices of act(fc1(x)) together: right only with one rank.

EXPECT: ParallelMLP  .*forward/output.*hint:.*no communication between fc1 and fc2
CLASS: traffic
WORLD_SIZES: 2
ONLY: ParallelMLP
RULE: Communication
"""

# The bug, as edits of the reference solution (solutions/tensor_parallel.py):
EDITS = {
    "ParallelMLP.forward": [
        (r'''        return self.fc2(self.act(self.fc1(x)))
''',
         r'''        hidden = comm.all_reduce(self.act(self.fc1(x)), self.fc2.group)   # sync before fc2
        return self.fc2(hidden)
'''),
    ],
}
