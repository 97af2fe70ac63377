"""g's forward as an asynchronous all-reduce, waited at once (async_op=True and a handle)."""
EDITS = {
    "AllReduce.forward": [
        (r'''        dist.all_reduce(out, group=group)''',
         r'''        handle = dist.all_reduce(out, group=group, async_op=True)
        handle.wait()'''),
    ],
}
