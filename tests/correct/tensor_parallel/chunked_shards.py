"""Shards taken with torch.chunk(...)[rank] and copied with torch.no_grad, instead of narrow."""
REPLACE = [
    ('''    size = tensor.shape[dim] // world
    return tensor.detach().narrow(dim, rank * size, size)''',
     '''    return torch.chunk(tensor.detach(), world, dim=dim)[rank]'''),
]
