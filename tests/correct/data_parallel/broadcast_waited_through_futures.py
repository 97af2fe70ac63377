"""The constructor starts every broadcast with async_op=True and waits for them all at once
through their futures (torch.futures.wait_all), which waits in C++ where the log cannot see a
wait(): a work turned into a future counts as waited."""
EDITS = {
    "DataParallel.__init__": [
        (r'''            for t in list(module.parameters()) + list(module.buffers()):
                dist.broadcast(t, src=src, group=group)''',
         r'''            works = [dist.broadcast(t, src=src, group=group, async_op=True)
                     for t in list(module.parameters()) + list(module.buffers())]
            torch.futures.wait_all([w.get_future() for w in works])'''),
    ],
}
