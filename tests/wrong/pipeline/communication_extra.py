r"""The last stage sends each micro-batch's loss back to the first stage, to log it there.

EXPECT: rank 0, M=6: 12 recv\\|irecv call\(s\), expected exactly 6.*rule .Communication.: gpipe receives, per micro-batch
CLASS: traffic
RULE: Communication
WORLD_SIZES: 3
ONLY: gpipe

A wrong implementation: solutions/pipeline.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/pipeline.py):
EDITS = {
    "gpipe": [
        (r'''        if stage.is_last:
            loss = out.detach() if loss is None else loss + out.detach()
        else:
            _exchange(stage, send=[(out.detach(), stage.next)])
        kept.append((x, out))
''',
         r'''        if stage.is_last:
            loss = out.detach() if loss is None else loss + out.detach()
            if not stage.is_first:
                _exchange(stage, send=[(out.detach(), dist.get_global_rank(stage.group, 0)
                                        if stage.group is not None else 0)])
        else:
            _exchange(stage, send=[(out.detach(), stage.next)])
        if stage.is_first and not stage.is_last:
            logged = torch.empty((), dtype=x.dtype, device=x.device)
            last = dist.get_world_size(group) - 1
            _exchange(stage, recv=[(logged, dist.get_global_rank(group, last)
                                    if group is not None else last)])
        kept.append((x, out))
'''),
    ],
}
