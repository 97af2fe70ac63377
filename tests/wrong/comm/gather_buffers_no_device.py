r"""AllGather receives into torch.empty(x.shape, dtype=x.dtype) buffers, with no device: on a
GPU run they are in CPU memory and NCCL refuses them.

EXPECT: all_gather was given a \[[\d, ]+\] float64 tensor made without a device \(at comm.py:\d+.*hint: rule 'Device'
CLASS: device
WORLD_SIZES: 2
ONLY: AllGather
RULE: Device
"""
EDITS = {
    "AllGather.forward": [
        (r'''        parts = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(parts, x.contiguous(), group=group)''',
         r'''        parts = [torch.empty(x.shape, dtype=x.dtype) for _ in range(world)]
        dist.all_gather(parts, x.contiguous(), group=group)'''),
    ],
}
