r"""Registers the hook on every parameter, frozen ones too: torch refuses a hook on a tensor that does not require grad.

EXPECT: ERROR  \[E1\.2\] data_parallel\.DataParallel_frozen_accumulated .*phase init
SAYS: data_parallel.DataParallel_frozen_accumulated:error/init
CLASS: values frozen
WORLD_SIZES: 2
ONLY: DataParallel_frozen_accumulated
RULE: Frozen and unused

A wrong implementation: solutions/data_parallel.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/data_parallel.py):
EDITS = {
    "DataParallel.__init__": [
        (r'''            if p.requires_grad:
                p.register_post_accumulate_grad_hook(self._on_grad)
''',
         r'''            p.register_post_accumulate_grad_hook(self._on_grad)
'''),
    ],
}
