r"""RowParallelLinear copies its partial product into a scratch buffer kept on the module and
all-reduces that (the all-reduce returns a new tensor): the output is new every call."""
EDITS = {
    "RowParallelLinear.forward": [
        (r'''        y = comm.all_reduce(F.linear(x, self.weight), self.group)
        return y + self.bias if self.bias is not None else y
''',
         r'''        partial = F.linear(x, self.weight)
        scratch = getattr(self, "_scratch", None)
        if scratch is None or scratch.shape != partial.shape or scratch.dtype != partial.dtype:
            scratch = self._scratch = torch.empty_like(partial)
        scratch = scratch.detach().copy_(partial)
        y = comm.all_reduce(scratch, self.group)
        return y + self.bias if self.bias is not None else y
'''),
    ],
}
