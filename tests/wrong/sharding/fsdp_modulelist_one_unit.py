r"""FSDP takes every child that holds parameters as a unit, an nn.ModuleList included: the
transformer's `layers` becomes one unit whose hooks never fire (a ModuleList is never called;
its parent loops over it), so its blocks' parameters are gone when they compute.

EXPECT: sharding\.FullyShardedDataParallel .*it equals what cutting 3 units .*'layers' \(an nn\.ModuleList\) taken as ONE unit.*hint: found 3 units, expected 5 .*an nn\.ModuleList or nn\.Sequential child counts by ITS children
CLASS: nested
WORLD_SIZES: 2
ONLY: FullyShardedDataParallel
"""

# The bug, as edits of the reference solution (solutions/sharding.py):
EDITS = {
    "units_of": [
        (r'''        if isinstance(child, (nn.ModuleList, nn.Sequential)):
            found += units_of(child, f"{prefix}{name}.")
        elif any(True for _ in child.parameters()):
''',
         r'''        if any(True for _ in child.parameters()):
'''),
    ],
}
