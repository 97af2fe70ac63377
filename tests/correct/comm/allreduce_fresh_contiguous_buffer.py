"""AllReduce all-reduces a fresh buffer made contiguous whatever the input's strides
(torch.empty_like(x, memory_format=torch.contiguous_format), then copy_) instead of
x.contiguous().clone().
"""
EDITS = {
    "AllReduce.forward": [
        (r'''        out = x.contiguous().clone()
        dist.all_reduce(out, group=group)
        return out
''',
         r'''        out = torch.empty_like(x, memory_format=torch.contiguous_format).copy_(x)
        dist.all_reduce(out, group=group)
        return out
'''),
    ],
}
