"""ShardedOptimizer as real ZeRO overlaps it: a post-accumulate-grad hook on each parameter
that requires grad posts its gradient's reduce-scatter (async_op=True) during backward, and
step() waits for the handles before stepping the shards. The hooks hold the optimizer by a
weak reference: a parameter's hook that holds it strongly makes a cycle through torch's C++
hook table that the garbage collector cannot break, keeping a dropped optimizer and its
model alive."""
EDITS = {
    "ShardedOptimizer.__init__": [
        (r'''        self.optimizer = optimizer_cls(self.shards, **optimizer_kwargs)
''',
         r'''        self.optimizer = optimizer_cls(self.shards, **optimizer_kwargs)
        self.pending = {}                   # parameter index: (handle, output, padded input)
        for i, p in enumerate(self.params):
            if p.requires_grad:             # a frozen parameter takes no hook
                p.register_post_accumulate_grad_hook(_reducer(weakref.ref(self), i))
'''),
    ],
    "ShardedOptimizer.step": [
        (r'''        for p, shard in zip(self.params, self.shards):
            if p.grad is None:
                shard.grad = None
                continue
            grad = shard.new_empty(shard.numel())
            dist.reduce_scatter_tensor(grad, padded(p.grad.reshape(-1), self.world),
                                       group=self.group)
            shard.grad = grad.div_(self.world)
''',
         r'''        for i, shard in enumerate(self.shards):
            if i not in self.pending:       # no gradient this step (frozen or unused)
                shard.grad = None
                continue
            handle, out, _ = self.pending.pop(i)
            handle.wait()
            shard.grad = out.div_(self.world)
'''),
    ],
    "units_of": [
        (r'''def units_of(module, prefix=""):
''',
         r'''def _reducer(ref, i):
    """The hook of parameter i: post its gradient's reduce-scatter, to be waited in step()."""
    def hook(p):
        opt = ref()
        sent = padded(p.grad.reshape(-1), opt.world).contiguous()
        out = opt.shards[i].new_empty(opt.shards[i].numel())
        handle = dist.reduce_scatter_tensor(out, sent, group=opt.group, async_op=True)
        opt.pending[i] = (handle, out, sent)
    return hook


def units_of(module, prefix=""):
'''),
    ],
}
# edits of module-level text, applied after EDITS:
REPLACE = [
    (r'''import torch
import torch.distributed as dist
''',
     r'''import weakref

import torch
import torch.distributed as dist
'''),
]
