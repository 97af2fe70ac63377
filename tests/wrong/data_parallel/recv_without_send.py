r"""DataParallel: ranks other than 0 wait to receive rank 0's weights, but rank 0 never sends them (a deadlock).

EXPECT: DataParallel.*deadlock: .*rank 1 waited in recv called from data_parallel.py:\d+.*rank 1 waits to receive from rank 0, but rank 0 never posted a send to rank 1
SAYS: hang.half-missing
CLASS: deadlock
WORLD_SIZES: 2
"""

# The bug, as edits of the reference solution (solutions/data_parallel.py):
EDITS = {
    "DataParallel.__init__": [
        (r'''            for t in list(module.parameters()) + list(module.buffers()):
                dist.broadcast(t, src=src, group=group)
''',
         r'''            if dist.get_rank(group) != 0:
                for t in list(module.parameters()) + list(module.buffers()):
                    dist.recv(t, src=src, group=group)
'''),
    ],
}
