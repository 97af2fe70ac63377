"""rotate_async lists the receive before the send in its batch (any order inside one
batch_isend_irecv is valid).
"""
EDITS = {
    "rotate_async": [
        (r'''    works = dist.batch_isend_irecv([dist.P2POp(dist.isend, sent, dst, group),
                                    dist.P2POp(dist.irecv, received, src, group)])''',
         r'''    works = dist.batch_isend_irecv([dist.P2POp(dist.irecv, received, src, group),
                                    dist.P2POp(dist.isend, sent, dst, group)])'''),
    ],
}
