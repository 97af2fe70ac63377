r"""rotate_async unpacks the list batch_isend_irecv returns into a send and a receive handle:
gloo returns one handle per operation, but NCCL ONE for the whole batch, so on a GPU the
unpacking raises (the checker gives one handle on CPU too).

EXPECT: not enough values to unpack \(expected 2, got 1\)
SAYS: exception.one-handle
CLASS: device
WORLD_SIZES: 2
ONLY: rotate
"""
EDITS = {
    "rotate_async": [
        (r'''    works = dist.batch_isend_irecv([dist.P2POp(dist.isend, sent, dst, group),
                                    dist.P2POp(dist.irecv, received, src, group)])
    return RotationHandle(works, received, sent)''',
         r'''    send_work, recv_work = dist.batch_isend_irecv([dist.P2POp(dist.isend, sent, dst, group),
                                                   dist.P2POp(dist.irecv, received, src, group)])
    return RotationHandle([send_work, recv_work], received, sent)'''),
    ],
}
