r"""Each batch lists its receives before its sends, and each work is waited by polling is_completed().

A correct implementation: solutions/pipeline.py with this one difference.
"""

# The difference, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "_exchange": [
        (r'''    ops = [dist.P2POp(dist.isend, t.contiguous(), peer, stage.group) for t, peer in send] + \
          [dist.P2POp(dist.irecv, buf, peer, stage.group) for buf, peer in recv]
    if ops:
        for work in dist.batch_isend_irecv(ops):
            work.wait()
''',
         r'''    ops = [dist.P2POp(dist.irecv, buf, peer, stage.group) for buf, peer in recv]
    ops += [dist.P2POp(dist.isend, t.contiguous(), peer, stage.group) for t, peer in send]
    if ops:
        works = dist.batch_isend_irecv(ops)
        for work in works:
            work.wait()
'''),
    ],
}
