r"""rotate_async makes the receive buffer with tensor.new_empty(..., device="cpu"): on a CPU
run that is the tensor's own device, on a GPU run CPU memory that NCCL refuses to receive
into (red team rt9, A06: new_empty and the *_like factories were not watched).

EXPECT: irecv was given a \[[\d, ]+\] float64 tensor made without a device \(at rotation.py:\d+ in rotate_async.*hint: rule 'Device'
CLASS: device
WORLD_SIZES: 2
ONLY: rotate
"""
# only what the bug changes: the factory, and the device written as "cpu"
EDITS = {
    "rotate_async": [
        (r'''torch.empty(''', r'''tensor.new_empty('''),
        (r'''device=tensor.device)''', r'''device="cpu")'''),
    ],
}
