r"""rotate_async receives into a buffer it keeps for the next rotation of the same shape ("no
allocation per step") and returns it: the caller's earlier result changes under it.

EXPECT: rotation\.rotate .*again/first result after a second call max abs error.*hint: rule 'New tensors'.*never a buffer kept
CLASS: kept-output in-place
WORLD_SIZES: 2
ONLY: rotate
"""

# The bug, as edits of the reference solution (solutions/rotation.py):
EDITS = {
    "rotate_async": [
        (r'''    received = torch.empty(tuple(tensor.shape) if recv_shape is None else tuple(recv_shape),
                           dtype=recv_dtype or tensor.dtype, device=tensor.device)
''',
         r'''    shape = tuple(tensor.shape) if recv_shape is None else tuple(recv_shape)
    key = (shape, recv_dtype or tensor.dtype, tensor.device)
    received = _RECEIVE_BUFFERS.get(key)
    if received is None:
        received = _RECEIVE_BUFFERS[key] = torch.empty(shape, dtype=key[1], device=key[2])
'''),
    ],
}
# edits of module-level text, applied after EDITS:
REPLACE = [
    (r'''DIRECTIONS = ("clockwise", "counterclockwise")
''',
     r'''DIRECTIONS = ("clockwise", "counterclockwise")
_RECEIVE_BUFFERS = {}   # one receive buffer per (shape, dtype, device), reused
'''),
]
