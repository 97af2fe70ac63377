r"""rotate_async makes the receive buffer with torch.frombuffer over a bytearray: a factory
with no device, so on a GPU run the buffer is in CPU memory and NCCL refuses it.

EXPECT: irecv was given a \[[\d, ]+\] float64 tensor made without a device \(at rotation.py:\d+ in rotate_async.*hint: rule 'Device'
CLASS: device
WORLD_SIZES: 2
ONLY: rotate
"""
EDITS = {
    "rotate_async": [
        (r'''    received = torch.empty(tuple(tensor.shape) if recv_shape is None else tuple(recv_shape),
                           dtype=recv_dtype or tensor.dtype, device=tensor.device)''',
         r'''    shape = tuple(tensor.shape) if recv_shape is None else tuple(recv_shape)
    dtype = recv_dtype or tensor.dtype
    received = torch.frombuffer(bytearray(max(1, math.prod(shape)) * dtype.itemsize),
                                dtype=dtype)[:math.prod(shape)].view(shape)'''),
    ],
}
# edits of module-level text, applied after EDITS:
REPLACE = [
    (r'''import torch
''',
     r'''import math
import torch
'''),
]
