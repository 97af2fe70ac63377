"""ring_all_gather writes every arriving block into a preallocated output (narrow/copy_)
instead of keeping a list and concatenating."""
EDITS = {
    "ring_all_gather": [
        (r'''    parts = [None] * world
    parts[rank] = current = tensor.detach()
    for k in range(1, world):
        current = rotate(current, "clockwise", group)
        parts[(rank - k) % world] = current
    return torch.cat(parts, dim=dim)''',
         r'''    size = tensor.shape[dim]
    shape = list(tensor.shape)
    shape[dim] = size * world
    out = tensor.new_empty(shape)
    current = tensor.detach()
    out.narrow(dim, rank * size, size).copy_(current)
    for k in range(1, world):
        current = rotate(current, "clockwise", group)
        out.narrow(dim, ((rank - k) % world) * size, size).copy_(current)
    return out'''),
    ],
}
