"""The parent's side of checker/inputs.py: serves each rank of a launch its own data.

A rank asks (checker/common.py, over its channel: checker/channel.py) for a tensor drawn
from a set's key, or for the state of a module a check builds from it; the parent, which
holds the keys, draws it (with common's own functions, so the rank gets what `expected()`
drew) and answers only for a set the asking rank is in.
"""
from __future__ import annotations

import threading

import torch

from rtp_course.checker import common
from rtp_course.checker.inputs import scope

MAX_ELEMENTS = 1 << 22          # in one requested tensor
MAX_SERVED = 256 << 20          # bytes served to one rank in one launch
MAX_BUILDING = 4                # modules one rank may wait for at once (a rank asks for one)
KINDS = ("randn", "rand", "randint")


class Provider:
    """Serves a launch's ranks their own data (`serve`, called by the channel's server with
    the rank whose channel asks): a tensor drawn from a set's key, or the state of a
    module a check builds from it, only for a set the asking rank is in. Modules are built
    by the check's own `owned` builders, in the thread that computes expected values (they
    seed torch's global generator), ahead of them."""

    def __init__(self, world_size: int, checks: list, urgent):
        self.world_size, self.urgent = world_size, urgent
        self.order = list(checks)              # the launch's checks, by the index ranks run them
        self.served, self.building = {}, {}
        self.lock = threading.Lock()           # the channel's threads count up, the builder's down

    def serve(self, rank: int, request: dict, index):
        """(reply header, tensors), or a concurrent Future of them, of the check at `index`
        of the launch (the one the asking rank is in); ValueError: refused."""
        if type(index) is not int or not 0 <= index < len(self.order):
            raise ValueError("inputs are served inside a check")
        with scope(self.order[index].id):
            return self._serve(rank, request, self.order[index])

    def _serve(self, rank: int, request: dict, current):
        owner = request.get("owner")
        if not (isinstance(owner, list) and owner and len(owner) <= self.world_size
                and all(type(r) is int and 0 <= r < self.world_size for r in owner)):
            raise ValueError("inputs are asked for with their owner ranks")
        if rank not in owner:
            raise ValueError(f"rank {rank} asked for the data of ranks {owner}: a rank gets "
                             f"only its own")
        base = request.get("seed")
        if type(base) is not int or not 0 <= base < (1 << 62):
            raise ValueError("an input's seed is a non-negative int")
        what = request.get("what")
        if what in KINDS:
            shape, dtype = request.get("shape"), request.get("dtype")
            if not (isinstance(shape, list) and len(shape) <= 8
                    and all(type(d) is int and 0 <= d <= MAX_ELEMENTS for d in shape)):
                raise ValueError("a shape that is not one")
            numel = 1
            for d in shape:
                numel *= d
            if numel > MAX_ELEMENTS:
                raise ValueError(f"an input of {numel} elements (at most {MAX_ELEMENTS})")
            if what == "randint":
                high = request.get("high")
                if type(high) is not int or not 0 < high < (1 << 62):
                    raise ValueError("randint's high is a positive int")
                self._charge(rank, numel * torch.int64.itemsize)   # before drawing: a refused
                t = common.randint(base, high, *shape, owner=owner)  # request costs nothing
            else:
                kind = getattr(torch, str(dtype), None)
                if not isinstance(kind, torch.dtype) or not kind.is_floating_point:
                    raise ValueError(f"{what} of dtype {dtype}")
                self._charge(rank, numel * kind.itemsize)
                t = getattr(common, what)(base, *shape, dtype=kind, owner=owner)
            return {}, [t]
        if what == "module":
            check, builder = current, request.get("builder")
            if request.get("check") != check.id or builder not in type(check).owned:
                raise ValueError(f"check {check.id} builds no {str(builder)[:40]!r}")
            kind = getattr(torch, str(request.get("dtype")), None)
            if not isinstance(kind, torch.dtype) or not kind.is_floating_point:
                raise ValueError("a module's dtype is a floating dtype")
            with self.lock:
                if self.building.get(rank, 0) >= MAX_BUILDING:
                    raise ValueError(f"rank {rank} asked for more than {MAX_BUILDING} modules "
                                     f"at once")
                self.building[rank] = self.building.get(rank, 0) + 1
            future = self.urgent(self._module, rank, check, builder, base, owner, kind)
            future.add_done_callback(lambda _: self._built(rank))
            return future
        raise ValueError(f"unknown input {str(what)[:40]!r}")

    def _built(self, rank: int) -> None:
        with self.lock:
            self.building[rank] -= 1

    def _module(self, rank, check, builder, base, owner, dtype):
        with torch.random.fork_rng(devices=[]), scope(check.id):
            module = common.owned_module(check, builder, base, owner, dtype)
        state = module.state_dict()
        tensors = [t.detach().contiguous() for t in state.values()]
        self._charge(rank, sum(t.numel() * t.element_size() for t in tensors))
        return {"names": list(state)}, tensors

    def _charge(self, rank: int, nbytes: int) -> None:
        if self.served.get(rank, 0) + nbytes > MAX_SERVED:
            raise ValueError(f"rank {rank} asked for more than {MAX_SERVED >> 20} MB of inputs")
        self.served[rank] = self.served.get(rank, 0) + nbytes
