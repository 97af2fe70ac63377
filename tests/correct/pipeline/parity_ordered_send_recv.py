r"""Blocking send/recv in rank-parity order (even stages send first, odd ones receive first) instead of batch_isend_irecv.

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
         r'''    def sends():
        for t, peer in send:
            dist.send(t.contiguous(), peer, group=stage.group)

    def recvs():
        for buf, peer in recv:
            dist.recv(buf, peer, group=stage.group)
    if dist.get_rank(stage.group) % 2 == 0:
        sends()
        recvs()
    else:
        recvs()
        sends()
'''),
    ],
}
