"""build_groups through torch's DeviceMesh: a (dp, tp) mesh, whose "tp" and "dp" dimensions
are exactly the reference's groups.
"""
EDITS = {
    "build_groups": [
        (r'''    tp_group = dp_group = None
    for d in range(dp_size):
        created = dist.new_group([ranks[d * tp_size + t] for t in range(tp_size)])
        if d == dp_rank:
            tp_group = created
    for t in range(tp_size):
        created = dist.new_group([ranks[d * tp_size + t] for d in range(dp_size)])
        if t == tp_rank:
            dp_group = created
''',
         r'''    from torch.distributed.device_mesh import init_device_mesh
    device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    mesh = init_device_mesh(device, (dp_size, tp_size), mesh_dim_names=("dp", "tp"))
    tp_group, dp_group = mesh.get_group("tp"), mesh.get_group("dp")
'''),
    ],
}
