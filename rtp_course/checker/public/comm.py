"""Public checks for E2 `comm`: Megatron's f and g, and the gather/split pair.

Every rank feeds a known input and a known upstream gradient (different on
each rank where that matters) and records the output and the input gradient.
The communication each function may do is fixed: f is free in forward and
one all-reduce in backward, g the reverse, and so on.
"""
from __future__ import annotations

import torch

from rtp_course.checker.common import randn
from rtp_course.checker.public.tensor_parallel_harness import raises
from rtp_course.checker.registry import Check, CommRule
from rtp_course.runtime import asked

# torch's own, taken before the code under test is imported: a Tensor.register_hook it
# replaced (a no-op: no hook, all([]) is True) is not what the check calls.
_register_hook = torch.Tensor.register_hook

SHAPE = (12, 12, 12)  # every dim divisible by 1, 2, 3 and 4


def x_same(seed=1):          # a replicated activation: the same on every rank
    return randn(seed, *SHAPE)


def x_rank(rank, seed=2):     # a per-rank tensor, drawn from rank's own key (checker.inputs)
    return randn(seed, *SHAPE, owner=rank)


def g_rank(rank, shape=SHAPE, seed=3):  # a per-rank upstream gradient, rank's own too
    return randn(seed, *shape, owner=rank)


CONTIGUOUS = "the gradient backward returned is contiguous"
KEPT = "output after the later calls"     # a buffer kept for the next call shows here


def transposed(t: torch.Tensor) -> torch.Tensor:
    """The same values as a non-contiguous view (strides of a transpose), as activations
    often arrive: rule 'Contiguity' asks for a contiguous copy before a collective."""
    return t.transpose(0, 2).contiguous().transpose(0, 2)


class _FunctionCheck(Check):
    """Every call's forward first, then their backwards in order: a function called again
    before the first call's backward (as a model does with two inputs) must keep its state
    in ctx, not on the class; the first output must not change under the later calls."""
    exercise = "comm"
    fn_name = ""          # function form in the module, e.g. "duplicate"
    contiguous_grad = False   # the stub states that backward returns a contiguous gradient
    dims = (None,)        # dims to try for gather/split (None: no dim argument)

    def call(self, mod, x, dim, group):
        fn = getattr(mod, self.fn_name)
        return fn(x, group=group) if dim is None else fn(x, dim=dim, group=group)

    def calls(self):
        """[(tag, dim, variant)]: one call per dim; a function without dim is called twice."""
        if self.dims == (None,):
            return [("", None, 0), (" (second call)", None, 1)]
        return [(f" dim={dim}", dim, 0) for dim in self.dims]

    def input(self, rank, world_size, dim, variant=0):
        raise NotImplementedError

    def upstream(self, rank, world_size, shape, variant=0):
        return g_rank(rank, shape)

    def out_shape(self, world_size, dim):
        return SHAPE

    def run(self, ctx):
        mod, outs = ctx.impl.comm, []
        for tag, dim, variant in self.calls():
            x = ctx.to(self.input(ctx.rank, ctx.world_size, dim, variant)).clone()
            x.requires_grad_(True)          # a clone keeps a transposed input's strides
            with ctx.phase("forward"):
                y = self.call(mod, x, dim, ctx.group)
            ctx.record(f"forward/output{tag}", y)
            ctx.record(f"forward/input after{tag}", x)
            outs.append((tag, dim, variant, x, y))
        ctx.record(f"forward/{KEPT}", outs[0][4])
        for tag, dim, variant, x, y in outs:
            shape = self.out_shape(ctx.world_size, dim)
            if not isinstance(y, torch.Tensor) or tuple(y.shape) != shape:
                continue  # the verdict reports the forward shape; backward would only add noise
            g = ctx.to(self.upstream(ctx.rank, ctx.world_size, shape, variant))
            g_copy = g.clone()
            returned = []   # what backward returned for x, before autograd accumulates it
            if self.contiguous_grad:
                _register_hook(x, lambda grad: returned.append(asked.is_contiguous(grad)))
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
            for i, (tag, dim, variant) in enumerate(self.calls()):
                out, grad = self.serial(r, world_size, dim, variant)
                if self.contiguous_grad:
                    e[f"backward/{CONTIGUOUS}{tag}"] = True
                e[f"forward/output{tag}"] = out
                if i == 0:
                    e[f"forward/{KEPT}"] = out
                e[f"forward/input after{tag}"] = self.input(r, world_size, dim, variant)
                e[f"backward/grad input{tag}"] = grad
                e[f"backward/upstream grad after{tag}"] = self.upstream(
                    r, world_size, self.out_shape(world_size, dim), variant)
            exp[r] = e
        return exp

    hints = {
        "forward/input after": "rule 'New tensors': forward changed its input in place; "
                               "communicate on a copy (x.clone())",
        f"forward/{KEPT}": "rule 'New tensors': the first call's output changed when the "
                           "function was called again: each call returns a tensor of its "
                           "own, never a buffer kept (on the class, in a global) for the next "
                           "call",
        "backward/upstream grad after": "rule 'New tensors' (the same holds for grad_output): "
                                        "backward changed the incoming gradient in place; "
                                        "all-reduce a clone of grad_output",
    }


class DuplicationCheck(_FunctionCheck):
    name, fn_name = "Duplication", "duplicate"
    hints = dict(_FunctionCheck.hints, **{
        "forward/output": "f (Duplication) is the identity in forward",
        "backward/grad input": "f's backward must SUM the gradients of all ranks (all-reduce): "
                               "each rank's copy of x fed a different shard, so dL/dx is the sum",
    })

    def input(self, rank, world_size, dim, variant=0):
        return x_same(1 + variant)

    def upstream(self, rank, world_size, shape, variant=0):
        """The second call's upstream gradient is zero on the last rank: it all-reduces it
        all the same (every rank makes the same calls, whatever its data)."""
        g = g_rank(rank, shape, seed=3 + variant)
        return g * 0 if variant and world_size > 1 and rank == world_size - 1 else g

    def serial(self, r, w, dim, variant=0):
        return x_same(1 + variant), sum(self.upstream(q, w, SHAPE, variant) for q in range(w))

    def comm_rules(self, w):
        if w == 1:
            return []
        return [CommRule("forward", "*", 0, "Duplication's forward is the identity: no communication"),
                CommRule("backward", "all_reduce", 2, "Duplication's backward is one all-reduce "
                         "per call, also when this rank's gradient is zero"),
                CommRule("backward", "*", 2, "Duplication's backward is one all-reduce and nothing else")]


class AllReduceCheck(_FunctionCheck):
    name, fn_name = "AllReduce", "all_reduce"
    hints = dict(_FunctionCheck.hints, **{
        "forward/output": "g (AllReduce) sums the partial results of all ranks in forward",
        "backward/grad input": "g's backward is the identity: the output is replicated, so each "
                               "rank's gradient already is the gradient of its partial sum",
    })

    def input(self, rank, world_size, dim, variant=0):
        """A plain tensor first; then a transposed view (rule 'Contiguity'), zero on the last
        rank (it all-reduces it all the same)."""
        if variant == 0:
            return x_rank(rank)
        x = transposed(x_rank(rank, seed=5))
        return x * 0 if world_size > 1 and rank == world_size - 1 else x

    def serial(self, r, w, dim, variant=0):
        return sum(self.input(q, w, dim, variant) for q in range(w)), g_rank(r)

    def comm_rules(self, w):
        if w == 1:
            return []
        return [CommRule("forward", "all_reduce", 2, "AllReduce's forward is one all-reduce per "
                         "call, also when this rank's input is zero"),
                CommRule("forward", "*", 2, "AllReduce's forward is one all-reduce and nothing else"),
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

    def input(self, rank, world_size, dim, variant=0):
        return x_rank(rank)

    def out_shape(self, w, dim):
        s = list(SHAPE)
        s[dim] *= w
        return tuple(s)

    def serial(self, r, w, dim, variant=0):
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
        "uneven size": "rule 'Raises': S must be divisible by N; otherwise Split raises "
                       "ValueError naming the sizes (the docstring), instead of dropping the "
                       "last S % N entries",
    })

    def input(self, rank, world_size, dim, variant=0):
        return x_same()

    def out_shape(self, w, dim):
        s = list(SHAPE)
        s[dim] //= w
        return tuple(s)

    def serial(self, r, w, dim, variant=0):
        out = x_same().chunk(w, dim=dim)[r]
        grad = torch.cat([g_rank(q, self.out_shape(w, dim)) for q in range(w)], dim=dim)
        return out, grad

    UNEVEN = "uneven size/Split of a size N does not divide raises"

    def run(self, ctx):
        super().run(ctx)
        if ctx.world_size > 1:
            x = ctx.to(randn(71, 3, 2 * ctx.world_size + 1))
            with ctx.phase("uneven size"):
                kind, _ = raises(lambda: ctx.impl.comm.Split.apply(x, -1, ctx.group))
            ctx.record_value(self.UNEVEN, kind)

    def expected(self, world_size):
        exp = super().expected(world_size)
        for e in exp.values():
            if world_size > 1:
                e[self.UNEVEN] = "ValueError"
        return exp

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
