r"""Every transfer is a blocking dist.send, then a blocking dist.recv: in 1F1B's steady state two neighbours send to each other at once.

EXPECT: one_f_one_b.*deadlock: no rank moved.*rank 0 waited in send.*rank 1 waited in send
CLASS: deadlock
WORLD_SIZES: 2
ONLY: one_f_one_b

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "_exchange": [
        (r'''    ops = [dist.P2POp(dist.isend, t.contiguous(), peer, stage.group) for t, peer in send] + \
          [dist.P2POp(dist.irecv, buf, peer, stage.group) for buf, peer in recv]
    if ops:
        for work in dist.batch_isend_irecv(ops):
            work.wait()
''',
         r'''    for t, peer in send:
        dist.send(t.contiguous(), peer, group=stage.group)
    for buf, peer in recv:
        dist.recv(buf, peer, group=stage.group)
'''),
    ],
}
