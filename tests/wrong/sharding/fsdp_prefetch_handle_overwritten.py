r"""FSDP's post_gather posts a unit's all-gather whenever the unit is not gathered, even while
its prefetch is in flight, and overwrites the handle: the first all-gather is let go unwaited
and writes into the unit's full buffer after it was freed (resized to 0).

EXPECT: FullyShardedDataParallel .*let go of a work it never waited.{0,3}all_gather(_into_tensor)? at sharding\.py:\d+ in post_gather.*hint: .*(never overwrite a handle still in flight|keep the handle of every transfer you start)
CLASS: unwaited
WORLD_SIZES: 2
ONLY: FullyShardedDataParallel

Seen in a new student's E7 (issue 47): the rank died of SIGSEGV, the report said "a tensor used
after its memory was freed" and never which work was left unwaited.
"""

# The bug, as edits of the reference solution (solutions/sharding.py):
REPLACE = [
    ("""        if self.ready or self.handle is not None:
            return
        self.full.untyped_storage().resize_(self.nbytes)""",
     """        if self.ready:
            return
        self.full.untyped_storage().resize_(self.nbytes)"""),
    ("""    def _after_forward(self, module, args, output):
        self.free()""",
     """    def _after_forward(self, module, args, output):
        self.free()
        self.handle = None"""),
]
