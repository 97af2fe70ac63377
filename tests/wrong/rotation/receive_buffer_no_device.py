r"""rotate_async allocates the receive buffer with the right shape and dtype but no device:
on a GPU run it is in CPU memory and NCCL refuses to receive into it.

EXPECT: irecv was given a \[[\d, ]+\] float64 tensor made without a device \(at rotation.py:\d+ in rotate_async.*hint: rule 'Device'
CLASS: device
WORLD_SIZES: 2
ONLY: rotate
RULE: Device
"""
EDITS = {
    "rotate_async": [
        (r'''                           dtype=recv_dtype or tensor.dtype, device=tensor.device)''',
         r'''                           dtype=recv_dtype or tensor.dtype)'''),
    ],
}
