"""average_gradients divides by the world size as a CPU scalar tensor, torch.tensor(float(N)):
CUDA accepts a 0-dim CPU tensor in an op with GPU tensors, so this runs on a GPU (rule
'Device' allows it)."""
EDITS = {
    "average_gradients": [
        (r'''            p.grad /= world''',
         r'''            p.grad.div_(torch.tensor(float(world), dtype=p.grad.dtype))'''),
    ],
}
