"""Receives into the caller's tensor to save memory (rotate mutates its input).

EXPECT: clockwise/input after the call max abs error.*rule 'New tensors'
CLASS: in-place
WORLD_SIZES: 2
ONLY: rotate
RULE: New tensors

A wrong implementation: solutions/rotation.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/rotation.py):
EDITS = {
    "rotate_async": [
        (r'''    sent = tensor.detach().contiguous()  # a copy only if `tensor` was not contiguous
    received = torch.empty(tuple(tensor.shape) if recv_shape is None else tuple(recv_shape),
                           dtype=recv_dtype or tensor.dtype, device=tensor.device)
''',
         r'''    sent = tensor.detach().clone(memory_format=torch.contiguous_format)  # send a copy, and reuse the input's memory to receive
    received = tensor.detach() if recv_shape is None else torch.empty(
        tuple(recv_shape), dtype=recv_dtype or tensor.dtype, device=tensor.device)
'''),
    ],
}
