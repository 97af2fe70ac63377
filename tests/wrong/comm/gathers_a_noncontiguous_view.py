r"""AllGather's forward all-gathers its input as it comes: a non-contiguous view (an activation
after a transpose) passes gloo, but NCCL refuses it, so the GPU run fails.

EXPECT: all_gather was given a non-contiguous \[[\d, ]+\] \w+ tensor \(at comm.py:\d+ in forward
SAYS: exception.contiguity
CLASS: device
HIDDEN: yes
WORLD_SIZES: 2
ONLY: AllGather_noncontiguous
"""
EDITS = {
    "AllGather.forward": [
        (r'''        dist.all_gather(parts, x.contiguous(), group=group)''',
         r'''        dist.all_gather(parts, x, group=group)'''),
    ],
}
