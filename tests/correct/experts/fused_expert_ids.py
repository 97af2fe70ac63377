"""One fused dispatch: each token travels with its local expert's index as an extra column, so
only the rows per rank are exchanged (exchange_splits of [N, 1]) and the receiver reads each
row's expert from the row itself.
"""
EDITS = {
    "ExpertParallelMoE.forward": [
        (r'''        received = exchange_splits(counts, self.group)                 # [N, local]
        send, recv = counts.sum(1).tolist(), received.sum(1).tolist()
        tokens = all_to_all(x[t], send, recv, self.group)
        local = torch.arange(self.num_local, device=x.device).repeat(world)
        local = local.repeat_interleave(received.reshape(-1))         # each row's local expert
''',
         r'''        received = exchange_splits(counts.sum(1, keepdim=True), self.group)   # [N, 1]
        send, recv = counts.sum(1).tolist(), received.reshape(-1).tolist()
        ids = (r.expert[t, j] % self.num_local).to(x.dtype).unsqueeze(1)
        both = all_to_all(torch.cat([x[t], ids], dim=1), send, recv, self.group)
        tokens, local = both[:, :-1], both[:, -1].detach().round().long()
'''),
    ],
}
