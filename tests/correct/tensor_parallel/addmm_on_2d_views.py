"""The column and row layers compute on 2-D views of the input (torch.addmm / torch.mm on
[tokens, features], reshaped back) instead of F.linear on the batched tensor."""
EDITS = {
    "ColumnParallelLinear.forward": [
        (r'''        x = comm.duplicate(x, self.group)
        y = F.linear(x, self.weight, self.bias)
''',
         r'''        x = comm.duplicate(x, self.group)
        flat = x.reshape(-1, x.shape[-1])
        y = (torch.addmm(self.bias, flat, self.weight.t()) if self.bias is not None
             else torch.mm(flat, self.weight.t())).reshape(*x.shape[:-1], -1)
'''),
    ],
    "RowParallelLinear.forward": [
        (r'''        y = comm.all_reduce(F.linear(x, self.weight), self.group)
''',
         r'''        partial = torch.mm(x.reshape(-1, x.shape[-1]), self.weight.t())
        y = comm.all_reduce(partial.reshape(*x.shape[:-1], -1), self.group)
'''),
    ],
}
