r"""data_parallel_pipeline calls one_f_one_b without stage.group: r and N come from the world,
so a stage's warm-up is counted in the world, not in its pipeline (student walk-through M17).
Its transfer helper skips a transfer to no neighbour (as the student's did, by is_first /
is_last), so nothing raises: only the schedule shows it.

EXPECT: data_parallel_pipeline.*rank 0, step0/forwards and backwards, in order is 'F0 F1 F2 B0 B1 B2', expected 'F0 F1 B0 F2 B1 B2'.*rule 'Schedule'
CLASS: subgroup
WORLD_SIZES: 4
ONLY: data_parallel_pipeline

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "_exchange": [
        (r'''    ops = [''',
         r'''    send = [(t, peer) for t, peer in send if peer is not None]
    recv = [(buf, peer) for buf, peer in recv if peer is not None]
    ops = ['''),
    ],
    "data_parallel_pipeline": [
        (r'''                       loss_fn, num_microbatches, stage.group)''',
         r'''                       loss_fn, num_microbatches)'''),
    ],
}
