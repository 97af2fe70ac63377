r"""gpipe's send and recv calls leave out group=stage.group: on a subgroup they run on the whole
world (student walk-through M42; gloo completes them, the group is wrong).

EXPECT: subgroup.*recv at .* in gpipe ran on ranks \[0, 1, 2\]; this call belongs to the group of ranks \[0, 2\]
SAYS: pipeline.subgroup:wrong group
CLASS: subgroup
WORLD_SIZES: 3
ONLY: subgroup

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "gpipe": [
        (r'''        _exchange(stage, recv=[] if stage.is_first else [(x, stage.prev)])''',
         r'''        if not stage.is_first:
            dist.recv(x, stage.prev)'''),
        (r'''            _exchange(stage, send=[(out.detach(), stage.next)])''',
         r'''            dist.send(out.detach(), stage.next)'''),
        (r'''            _exchange(stage, recv=[(grad, stage.next)])''',
         r'''            dist.recv(grad, stage.next)'''),
        (r'''            _exchange(stage, send=[(dx, stage.prev)])''',
         r'''            dist.send(dx, stage.prev)'''),
    ],
}
