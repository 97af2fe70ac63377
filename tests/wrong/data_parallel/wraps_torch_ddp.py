r"""DataParallel delegates to torch's own DistributedDataParallel: the right numbers, but the
exercise is to build it (its C++ reducer communicates where no rule can judge it).

EXPECT: DataParallel .*phase init: rank 0, init: \d+ DistributedDataParallel call\(s\), expected exactly 0; seen: DistributedDataParallel at data_parallel\.py:\d+ in __init__.*rule 'Build it yourself'
CLASS: traffic
WORLD_SIZES: 2
ONLY: DataParallel
RULE: Build it yourself
"""
EDITS = {
    "DataParallel.__init__": [
        (r'''        src = dist.get_global_rank(group, 0) if group is not None else 0
        with torch.no_grad():
            for t in list(module.parameters()) + list(module.buffers()):
                dist.broadcast(t, src=src, group=group)
        self._pending = 0
        for p in module.parameters():
            if p.requires_grad:
                p.register_post_accumulate_grad_hook(self._on_grad)
''',
         r'''        from torch.nn.parallel import DistributedDataParallel
        self._ddp = [DistributedDataParallel(module, process_group=group)]
'''),
    ],
    "DataParallel.forward": [
        (r'''    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)''',
         r'''    def forward(self, *args, **kwargs):
        return self._ddp[0](*args, **kwargs)'''),
    ],
}
