r"""Separate isend and irecv in rank-parity order (even stages post the send first), each work waited.

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
         r'''    posts = [lambda t=t, peer=peer: dist.isend(t.contiguous(), peer, group=stage.group)
             for t, peer in send]
    gets = [lambda buf=buf, peer=peer: dist.irecv(buf, peer, group=stage.group)
            for buf, peer in recv]
    order = posts + gets if dist.get_rank(stage.group) % 2 == 0 else gets + posts
    works = [post() for post in order]
    for work in works:
        work.wait()
'''),
    ],
}
