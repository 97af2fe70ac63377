r"""data_parallel_pipeline runs gpipe instead of one_f_one_b: the same gradients, GPipe's
schedule and memory (student walk-through M36).

EXPECT: data_parallel_pipeline.*step0/forwards and backwards, in order is 'F0 F1 F2 B0 B1 B2', expected 'F0 B0 F1 B1 F2 B2'.*one_f_one_b \(not gpipe\)
CLASS: memory
WORLD_SIZES: 2
ONLY: data_parallel_pipeline

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "data_parallel_pipeline": [
        (r'''    loss = one_f_one_b(stage,''',
         r'''    loss = gpipe(stage,'''),
    ],
}
