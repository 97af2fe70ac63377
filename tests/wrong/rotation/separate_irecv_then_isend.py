r"""rotate_async posts a separate irecv, then an isend, instead of one batch_isend_irecv: gloo
completes it, NCCL runs a group's operations in the order they were posted and both ranks
wait in their receive first (two ranks: the same peer both ways).

EXPECT: \[E4.2\] rotation\.rotate .*world size 2.*on NCCL \(a GPU run\) these calls would never finish: rank 0 waits for its irecv from rank 1.*hint: rule 'Device': on NCCL, a rank's operations on a process group run in the order they were posted.*ONE batch_isend_irecv
CLASS: deadlock device
WORLD_SIZES: 2
ONLY: rotate
"""
EDITS = {
    "rotate_async": [
        (r'''    works = dist.batch_isend_irecv([dist.P2POp(dist.isend, sent, dst, group),
                                    dist.P2POp(dist.irecv, received, src, group)])''',
         r'''    works = [dist.irecv(received, src=src, group=group), dist.isend(sent, dst=dst, group=group)]'''),
    ],
}
