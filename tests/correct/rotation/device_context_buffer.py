"""rotate_async makes its receive buffer inside `with torch.device(tensor.device):`, with no
device= of its own: the context places it, on a GPU as on the CPU (rule 'Device' allows it)."""
EDITS = {
    "rotate_async": [
        (r'''    received = torch.empty(tuple(tensor.shape) if recv_shape is None else tuple(recv_shape),
                           dtype=recv_dtype or tensor.dtype, device=tensor.device)''',
         r'''    with torch.device(tensor.device):
        received = torch.empty(tuple(tensor.shape) if recv_shape is None else tuple(recv_shape),
                               dtype=recv_dtype or tensor.dtype)'''),
    ],
}
