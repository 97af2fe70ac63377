r"""RowParallelLinear writes its output into a buffer it keeps on the module and returns that
buffer (one allocation saved per call): the next call overwrites an output the caller still
holds.

EXPECT: RowParallelLinear .*output after the next call.*rule 'Results'.*a buffer kept
CLASS: kept-output
WORLD_SIZES: 2
ONLY: RowParallelLinear
"""

# The bug, as edits of the reference solution (solutions/tensor_parallel.py):
EDITS = {
    "RowParallelLinear.forward": [
        (r'''        y = comm.all_reduce(F.linear(x, self.weight), self.group)
        return y + self.bias if self.bias is not None else y
''',
         r'''        y = comm.all_reduce(F.linear(x, self.weight), self.group)
        if getattr(self, "_out", None) is None or self._out.shape != y.shape:
            self._out = torch.empty_like(y)               # allocated once, reused
        out = self._out.copy_(y)
        return out.add_(self.bias) if self.bias is not None else out
'''),
    ],
}
