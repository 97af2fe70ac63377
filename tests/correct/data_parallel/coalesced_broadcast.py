"""DataParallel's constructor broadcasts through dist.broadcast_object_list-free flat buffer:
parameters and buffers concatenated, one broadcast, copied back."""
EDITS = {
    "DataParallel.__init__": [
        (r'''            for t in list(module.parameters()) + list(module.buffers()):
                dist.broadcast(t, src=src, group=group)''',
         r'''            states = [t for t in list(module.parameters()) + list(module.buffers())
                      if t.is_floating_point()]
            flat = torch.cat([t.reshape(-1) for t in states]) if states else None
            if flat is not None:
                dist.broadcast(flat, src=src, group=group)
                offset = 0
                for t in states:
                    t.copy_(flat[offset:offset + t.numel()].view_as(t))
                    offset += t.numel()
            for t in [t for t in module.buffers() if not t.is_floating_point()]:
                dist.broadcast(t, src=src, group=group)'''),
    ],
}
