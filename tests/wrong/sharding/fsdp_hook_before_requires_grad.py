r"""FSDP calls full.requires_grad_(True) in the forward pre-hook (where the pieces are made)
and registers the post-accumulate-grad hook at construction, before it: torch refuses a hook
on a tensor that does not require grad.

EXPECT: sharding\.FullyShardedDataParallel .*phase init: .*cannot register a hook on a tensor that doesn.t require gradient.*hint: an exception at construction: register the post-accumulate-grad hook once, at construction, .*AFTER full\.requires_grad_\(True\)
CLASS: hook-placement
WORLD_SIZES: 2
ONLY: FullyShardedDataParallel
"""

# The bug, as edits of the reference solution (solutions/sharding.py):
EDITS = {
    "_Unit.__init__": [
        (r'''        self.full.requires_grad_(True)
        self.full.register_post_accumulate_grad_hook(self._after_backward)
''',
         r'''        self.full.register_post_accumulate_grad_hook(self._after_backward)
'''),
    ],
    "_Unit._before_forward": [
        (r'''        nxt = self._neighbour(+1)
        if nxt is not None:
            nxt.post_gather()                            # prefetch: travels while we compute
''',
         r'''        nxt = self._neighbour(+1)
        if nxt is not None:
            nxt.post_gather()                            # prefetch: travels while we compute
        self.full.requires_grad_(True)
'''),
    ],
}
