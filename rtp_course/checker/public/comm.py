"""Public checks for E2 `comm`: Megatron's f and g, and the gather/split pair.

Every rank feeds a known input and a known upstream gradient (different on
each rank where that matters) and records the output and the input gradient.
The communication each function may do is fixed: f is free in forward and
one all-reduce in backward, g the reverse, and so on.
"""
from __future__ import annotations

import torch

from rtp_course.checker.common import randn
from rtp_course.checker.registry import Check, CommRule

SHAPE = (12, 12, 12)  # every dim divisible by 1, 2, 3 and 4


def x_same(seed=1):          # a replicated activation: the same on every rank
    return randn(seed, *SHAPE)


def x_rank(rank, seed=2):     # a per-rank tensor, drawn from rank's own key (checker.inputs)
    return randn(seed, *SHAPE, owner=rank)


def g_rank(rank, shape=SHAPE, seed=3):  # a per-rank upstream gradient, rank's own too
    return randn(seed, *shape, owner=rank)


CONTIGUOUS = "the gradient backward returned is contiguous"


class _FunctionCheck(Check):
    exercise = "comm"
    fn_name = ""          # function form in the module, e.g. "duplicate"
    contiguous_grad = False   # the stub states that backward returns a contiguous gradient
    dims = (None,)        # dims to try for gather/split (None: no dim argument)

    def call(self, mod, x, dim, group):
        fn = getattr(mod, self.fn_name)
        return fn(x, group=group) if dim is None else fn(x, dim=dim, group=group)

    def input(self, rank, world_size, dim):
        raise NotImplementedError

    def out_shape(self, world_size, dim):
        return SHAPE

    def run(self, ctx):
        mod = ctx.impl.comm
        for dim in self.dims:
            tag = "" if dim is None else f" dim={dim}"
            x0 = ctx.to(self.input(ctx.rank, ctx.world_size, dim))
            x = x0.clone().requires_grad_(True)
            with ctx.phase("forward"):
                y = self.call(mod, x, dim, ctx.group)
            ctx.record(f"forward/output{tag}", y)
            ctx.record(f"forward/input after{tag}", x)
            shape = self.out_shape(ctx.world_size, dim)
            if tuple(y.shape) != shape:
                continue  # the verdict reports the forward shape; backward would only add noise
            g = ctx.to(g_rank(ctx.rank, shape))
            g_copy = g.clone()
            returned = []   # what backward returned for x, before autograd accumulates it
            if self.contiguous_grad:
                x.register_hook(lambda grad: returned.append(grad.is_contiguous()))
            with ctx.phase("backward"):
                y.backward(g)
            if self.contiguous_grad:
                ctx.record_value(f"backward/{CONTIGUOUS}{tag}", all(returned))
            ctx.record(f"backward/grad input{tag}", x.grad)
            ctx.record(f"backward/upstream grad after{tag}", g)
            ctx.record(f"backward/upstream grad copy{tag}", g_copy)

    def expected(self, world_size):
        exp = {}
        for r in range(world_size):
            e = {}
            for dim in self.dims:
                tag = "" if dim is None else f" dim={dim}"
                out, grad = self.serial(r, world_size, dim)
                if self.contiguous_grad:
                    e[f"backward/{CONTIGUOUS}{tag}"] = True
                e[f"forward/output{tag}"] = out
                e[f"forward/input after{tag}"] = self.input(r, world_size, dim)
                e[f"backward/grad input{tag}"] = grad
                e[f"backward/upstream grad after{tag}"] = g_rank(r, self.out_shape(world_size, dim))
            exp[r] = e
        return exp

    hints = {
        "forward/input after": "rule 'Never modify the caller's tensor': forward changed its "
                               "input in place; communicate on a copy (x.clone())",
        "backward/upstream grad after": "rule 'Never modify the caller's tensor' (the same holds "
                                        "for grad_output): backward changed the incoming "
                                        "gradient in place; all-reduce a clone of grad_output",
    }


class DuplicationCheck(_FunctionCheck):
    name, fn_name = "Duplication", "duplicate"
    hints = dict(_FunctionCheck.hints, **{
        "forward/output": "f (Duplication) is the identity in forward",
        "backward/grad input": "f's backward must SUM the gradients of all ranks (all-reduce): "
                               "each rank's copy of x fed a different shard, so dL/dx is the sum",
    })

    def input(self, rank, world_size, dim):
        return x_same()

    def serial(self, r, w, dim):
        return x_same(), sum(g_rank(q) for q in range(w))

    def comm_rules(self, w):
        if w == 1:
            return []
        return [CommRule("forward", "*", 0, "Duplication's forward is the identity: no communication"),
                CommRule("backward", "all_reduce", 1, "Duplication's backward is one all-reduce"),
                CommRule("backward", "*", 1, "Duplication's backward is one all-reduce and nothing else")]


class AllReduceCheck(_FunctionCheck):
    name, fn_name = "AllReduce", "all_reduce"
    hints = dict(_FunctionCheck.hints, **{
        "forward/output": "g (AllReduce) sums the partial results of all ranks in forward",
        "backward/grad input": "g's backward is the identity: the output is replicated, so each "
                               "rank's gradient already is the gradient of its partial sum",
    })

    def input(self, rank, world_size, dim):
        return x_rank(rank)

    def serial(self, r, w, dim):
        return sum(x_rank(q) for q in range(w)), g_rank(r)

    def comm_rules(self, w):
        if w == 1:
            return []
        return [CommRule("forward", "all_reduce", 1, "AllReduce's forward is one all-reduce"),
                CommRule("forward", "*", 1, "AllReduce's forward is one all-reduce and nothing else"),
                CommRule("backward", "*", 0, "AllReduce's backward is the identity: no communication")]


class AllGatherCheck(_FunctionCheck):
    name, fn_name = "AllGather", "all_gather"
    dims = (-1, 0, 1)
    contiguous_grad = True
    hints = dict(_FunctionCheck.hints, **{
        f"backward/{CONTIGUOUS}": "AllGather.backward must return a contiguous gradient: "
                                  "grad_output.narrow(dim, r*n, n) is a view with the strides "
                                  "of the whole; add .contiguous() (the gradient flows on into "
                                  "other layers' collectives, and NCCL sends only contiguous "
                                  "memory)",
        "forward/output": "concatenate the ranks' tensors in rank order along `dim`",
        "backward/grad input": "backward keeps THIS rank's slice of the gradient along `dim` "
                               "(rank r owns positions [r*n, (r+1)*n))",
    })

    def input(self, rank, world_size, dim):
        return x_rank(rank)

    def out_shape(self, w, dim):
        s = list(SHAPE)
        s[dim] *= w
        return tuple(s)

    def serial(self, r, w, dim):
        out = torch.cat([x_rank(q) for q in range(w)], dim=dim)
        return out, g_rank(r, self.out_shape(w, dim)).chunk(w, dim=dim)[r]

    def comm_rules(self, w):
        if w == 1:
            return []
        n = len(self.dims)
        return [CommRule("forward", "all_gather|all_gather_into_tensor", n,
                         "AllGather's forward is one all-gather per call"),
                CommRule("backward", "*", 0, "AllGather's backward keeps a slice: no communication")]


class SplitCheck(_FunctionCheck):
    name, fn_name = "Split", "split"
    dims = (-1, 0, 1)
    hints = dict(_FunctionCheck.hints, **{
        "forward/output": "keep THIS rank's slice along `dim`: rank r keeps [r*n, (r+1)*n) with "
                          "n = size / world_size, using the rank within `group`",
        "backward/grad input": "backward all-gathers the slices' gradients along `dim` in rank order",
    })

    def input(self, rank, world_size, dim):
        return x_same()

    def out_shape(self, w, dim):
        s = list(SHAPE)
        s[dim] //= w
        return tuple(s)

    def serial(self, r, w, dim):
        out = x_same().chunk(w, dim=dim)[r]
        grad = torch.cat([g_rank(q, self.out_shape(w, dim)) for q in range(w)], dim=dim)
        return out, grad

    def comm_rules(self, w):
        if w == 1:
            return []
        n = len(self.dims)
        return [CommRule("forward", "*", 0, "Split's forward keeps a slice: no communication"),
                CommRule("backward", "all_gather|all_gather_into_tensor", n,
                         "Split's backward is one all-gather per call")]


class SubgroupCheck(Check):
    """f, g, gather and split on two groups of two ranks: {0, 2} and {1, 3}."""
    exercise, name = "comm", "subgroups"
    task = "E2.1"       # where the rule "use `group`" is taught
    world_sizes = (4,)
    hints = {"": "use the process `group` argument for every collective and for the rank and "
                 "world size (dist.get_rank(group), dist.get_world_size(group)), not the world"}

    def run(self, ctx):
        mod = ctx.impl.comm
        groups = [ctx.new_group([0, 2]), ctx.new_group([1, 3])]
        group = groups[ctx.rank % 2]
        grank = ctx.rank // 2
        for fname, x in (("duplicate", x_same()), ("all_reduce", x_rank(ctx.rank)),
                         ("all_gather", x_rank(ctx.rank)), ("split", x_same())):
            x = ctx.to(x).requires_grad_(True)
            with ctx.phase("forward"):
                y = getattr(mod, fname)(x, group=group) if fname in ("duplicate", "all_reduce") \
                    else getattr(mod, fname)(x, dim=1, group=group)
            ctx.record(f"forward/{fname} output", y)
            with ctx.phase("backward"):
                y.backward(ctx.to(g_rank(ctx.rank, tuple(y.shape))))
            ctx.record(f"backward/{fname} grad input", x.grad)
        ctx.record_value("structure/group rank", grank)

    def expected(self, world_size):
        exp = {}
        for r in range(4):
            peers = [r % 2, r % 2 + 2]
            grank = r // 2
            gshape = lambda s: g_rank(r, s)  # noqa: E731
            half = list(SHAPE)
            half[1] //= 2
            dbl = list(SHAPE)
            dbl[1] *= 2
            exp[r] = {
                "forward/duplicate output": x_same(),
                "backward/duplicate grad input": sum(g_rank(q) for q in peers),
                "forward/all_reduce output": sum(x_rank(q) for q in peers),
                "backward/all_reduce grad input": g_rank(r),
                "forward/all_gather output": torch.cat([x_rank(q) for q in peers], dim=1),
                "backward/all_gather grad input": gshape(tuple(dbl)).chunk(2, dim=1)[grank],
                "forward/split output": x_same().chunk(2, dim=1)[grank],
                "backward/split grad input": torch.cat([g_rank(q, tuple(half)) for q in peers], dim=1),
            }
        return exp
