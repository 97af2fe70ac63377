r"""rotate_async moves the tensor to the CPU before sending it (.cpu(), as if messages had to
leave from host memory): on CPU that is the tensor itself, on a GPU a host copy that NCCL
refuses to send.

EXPECT: isend was given a \[[\d, ]+\] float64 tensor made without a device \(at rotation.py:\d+ in rotate_async.*hint: rule 'Device'
CLASS: device
WORLD_SIZES: 2
ONLY: rotate
"""
EDITS = {
    "rotate_async": [
        (r'''    sent = tensor.detach().contiguous()  # a copy only if `tensor` was not contiguous''',
         r'''    sent = tensor.detach().contiguous().cpu()'''),
    ],
}
