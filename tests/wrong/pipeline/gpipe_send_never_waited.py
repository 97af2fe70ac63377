r"""gpipe sends each activation with isend and never waits on its work (student walk-through
M68): gloo delivers it anyway, NCCL may still be reading the tensor.

EXPECT: gpipe.*rank 0, M=6/transfers never waited is \['isend at .* in gpipe'.*rule 'Wait on every work'
CLASS: unwaited
WORLD_SIZES: 2
ONLY: gpipe
RULE: Wait on every work

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "gpipe": [
        (r'''            _exchange(stage, send=[(out.detach(), stage.next)])''',
         r'''            dist.isend(out.detach(), stage.next, group=stage.group)'''),
    ],
}
