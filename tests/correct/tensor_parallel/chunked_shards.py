"""Shards taken with torch.chunk(...)[rank] and copied with torch.no_grad, instead of narrow."""
EDITS = {
    "_slice": [
        (r'''    size = tensor.shape[dim] // world
    return tensor.detach().narrow(dim, rank * size, size)''',
         r'''    return torch.chunk(tensor.detach(), world, dim=dim)[rank]'''),
    ],
}
