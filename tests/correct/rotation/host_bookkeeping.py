"""ring_all_gather keeps its bookkeeping in host tensors: which part arrives after each
rotation (torch.arange(N).roll(k), read with .tolist()), and the order of the parts as a
host index tensor into a stack of them. CUDA accepts both (host index tensors, values read
on the host), so this runs on a GPU (rule 'Device' allows it)."""
EDITS = {
    "ring_all_gather": [
        (r'''    parts = [None] * world
    parts[rank] = current = tensor.detach()
    for k in range(1, world):
        current = rotate(current, "clockwise", group)
        parts[(rank - k) % world] = current
    return torch.cat(parts, dim=dim)''',
         r'''    arrivals, current = [tensor.detach()], tensor.detach()
    for k in range(1, world):
        current = rotate(current, "clockwise", group)
        arrivals.append(current)
    owner = ((rank - torch.arange(world)) % world).tolist()   # arrival k holds part owner[k]
    order = torch.argsort(torch.tensor(owner))                # a host index tensor
    return torch.cat(torch.stack(arrivals)[order].unbind(0), dim=dim)'''),
    ],
}
