"""g's forward as an asynchronous all-reduce, waited at once (async_op=True and a handle)."""
REPLACE = [
    ("        dist.all_reduce(out, group=group)",
     "        handle = dist.all_reduce(out, group=group, async_op=True)\n        handle.wait()"),
]
