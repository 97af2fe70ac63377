r"""rotate_async makes the receive buffer with the legacy constructor torch.Tensor(*shape),
which takes no device: on a GPU run it is in CPU memory and NCCL refuses to receive into it.

EXPECT: irecv was given a \[[\d, ]+\] float64 tensor made without a device \(at rotation.py:\d+ in rotate_async.*hint: rule 'Device'
CLASS: device
WORLD_SIZES: 2
ONLY: rotate
"""
REPLACE = [
    ("""    received = torch.empty(tuple(tensor.shape) if recv_shape is None else tuple(recv_shape),
                           dtype=recv_dtype or tensor.dtype, device=tensor.device)""",
     """    received = torch.Tensor(*(tuple(tensor.shape) if recv_shape is None else tuple(recv_shape))
                            ).to(recv_dtype or tensor.dtype)"""),
]
