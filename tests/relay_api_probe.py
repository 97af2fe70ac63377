"""torch.distributed calls a student's correct code may make, run on gloo and on the relay:
tests/test_relay_api.py compares what each rank got (importable: spawn pickles by name)."""
import torch
import torch.distributed as dist


def _t(*values, dtype=torch.float64):
    return torch.tensor(values, dtype=dtype)


def every_api(rank: int, world: int) -> dict:
    out = {}
    r = float(rank)
    x = _t(r + 1, 2 * r + 3)
    for op in ("SUM", "MAX", "MIN", "PRODUCT"):
        y = x.clone()
        dist.all_reduce(y, op=getattr(dist.ReduceOp, op))
        out[f"all_reduce {op}"] = y
    y = x.clone()
    dist.all_reduce(y, async_op=True).wait()
    out["all_reduce async"] = y
    y = x.clone()
    fut = dist.all_reduce(y, async_op=True).get_future()
    out["all_reduce future"] = fut.wait()[0]
    parts = [torch.empty(2, dtype=torch.float64) for _ in range(world)]
    dist.all_gather(parts, x)
    out["all_gather"] = torch.cat(parts)
    flat = torch.empty(2 * world, dtype=torch.float64)
    dist.all_gather_into_tensor(flat, x)
    out["all_gather_into_tensor"] = flat
    mine = torch.empty(2, dtype=torch.float64)
    dist.reduce_scatter_tensor(mine, torch.arange(2.0 * world, dtype=torch.float64) * (r + 1))
    out["reduce_scatter_tensor"] = mine
    mine = torch.empty(2, dtype=torch.float64)
    try:                 # gloo before torch 2.7 has no reduce_scatter of a list: None there
        dist.reduce_scatter(mine, [torch.full((2,), r + q, dtype=torch.float64)
                                   for q in range(world)])
        out["reduce_scatter"] = mine
    except RuntimeError:
        out["reduce_scatter"] = None
    y = x.clone()
    dist.broadcast(y, src=world - 1)
    out["broadcast"] = y
    y = x.clone()
    dist.reduce(y, dst=0)
    out["reduce"] = y if rank == 0 else torch.zeros(0)
    gathered = [torch.empty(2, dtype=torch.float64) for _ in range(world)] if rank == 0 else None
    dist.gather(x, gathered, dst=0)
    out["gather"] = torch.cat(gathered) if rank == 0 else torch.zeros(0)
    got = torch.empty(2, dtype=torch.float64)
    dist.scatter(got, [_t(q, -q) for q in range(world)] if rank == 0 else None, src=0)
    out["scatter"] = got
    a2a = torch.empty(world, dtype=torch.float64)
    dist.all_to_all_single(a2a, torch.arange(world, dtype=torch.float64) + 10 * r)
    out["all_to_all_single"] = a2a
    outs = [torch.empty(1, dtype=torch.float64) for _ in range(world)]
    try:                 # gloo before torch 2.7 has no all_to_all of lists: None there
        dist.all_to_all(outs, [_t(10 * r + q) for q in range(world)])
        out["all_to_all"] = torch.cat(outs)
    except RuntimeError:
        out["all_to_all"] = None
    if world > 1:
        sizes_in = [q + 1 for q in range(world)]          # rank r sends q+1 rows to rank q
        rows_in = torch.arange(sum(sizes_in), dtype=torch.float64) + 100 * r
        got = torch.empty(world * (rank + 1), dtype=torch.float64)
        dist.all_to_all_single(got, rows_in, output_split_sizes=[rank + 1] * world,
                               input_split_sizes=sizes_in)
        out["all_to_all_single uneven"] = got
    objs = [{"from": rank}] if rank == 0 else [None]
    dist.broadcast_object_list(objs, src=0)
    out["broadcast_object_list"] = objs[0]["from"]
    gathered = [None] * world
    dist.all_gather_object(gathered, {"r": rank})
    out["all_gather_object"] = [g["r"] for g in gathered]
    got = [None] * world if rank == 0 else None
    dist.gather_object(rank * 3, got, dst=0)
    out["gather_object"] = got if rank == 0 else []
    got = [None]
    dist.scatter_object_list(got, [q * 5 for q in range(world)] if rank == 0 else None, src=0)
    out["scatter_object_list"] = got[0]
    dist.barrier()
    if world > 1:
        nxt, prv = (rank + 1) % world, (rank - 1) % world
        got = torch.empty(2, dtype=torch.float64)
        works = dist.batch_isend_irecv([dist.P2POp(dist.isend, x, nxt),
                                        dist.P2POp(dist.irecv, got, prv)])
        for w in works:
            w.wait()
        out["ring"] = got
        got = torch.empty(2, dtype=torch.float64)
        if rank % 2 == 0:
            dist.send(x, dst=nxt)
            dist.recv(got, src=prv)
        else:
            dist.recv(got, src=prv)
            dist.send(x, dst=nxt)
        out["blocking send/recv, odd-even"] = got if world % 2 == 0 else torch.zeros(0)
        req = dist.irecv(got := torch.empty(2, dtype=torch.float64), src=prv)
        dist.isend(x, dst=nxt).wait()
        req.wait()
        out["isend/irecv"] = got
        if rank == 0:
            dist.send_object_list([{"k": 7}], dst=1)
        elif rank == 1:
            got = [None]
            dist.recv_object_list(got, src=0)
            out["send_object_list"] = got[0]["k"]
    sub = dist.new_group([0, world - 1])
    if rank in (0, world - 1):
        y = x.clone()
        dist.all_reduce(y, group=sub)
        out["subgroup"] = y
        out["subgroup ranks"] = dist.get_process_group_ranks(sub)
    groups, _ = dist.new_subgroups_by_enumeration([list(range(0, world, 2)),
                                                    list(range(1, world, 2))]) \
        if world > 1 else (dist.new_group([0]), None)
    y = x.clone()
    dist.all_reduce(y, group=groups)
    out["new_subgroups_by_enumeration"] = y
    local = dist.new_group([rank], use_local_synchronization=True)
    y = x.clone()
    dist.all_reduce(y, group=local)
    out["local synchronization"] = y
    import torch.distributed._functional_collectives as funcol
    out["funcol all_reduce"] = funcol.all_reduce(x, "sum", dist.group.WORLD).wait()
    out["funcol all_gather"] = funcol.all_gather_tensor(x, 0, dist.group.WORLD).wait()
    out["funcol reduce_scatter"] = funcol.reduce_scatter_tensor(
        torch.arange(2.0 * world, dtype=torch.float64), "sum", 0, dist.group.WORLD).wait()
    if world == 4:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.tensor import Replicate, Shard, distribute_tensor
        mesh = init_device_mesh("cpu", (2, 2))
        dt = distribute_tensor(torch.arange(8.0, dtype=torch.float64).reshape(4, 2), mesh,
                               [Shard(0), Replicate()])
        out["dtensor full_tensor"] = dt.full_tensor()
        out["dtensor redistribute"] = dt.redistribute(mesh, [Replicate(), Shard(1)]).to_local()
    model = torch.nn.Linear(2, 1).double()
    torch.manual_seed(0)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    ddp(_t(r, 1.0).unsqueeze(0)).sum().backward()
    out["torch DDP grad"] = model.weight.grad.clone()
    return out
