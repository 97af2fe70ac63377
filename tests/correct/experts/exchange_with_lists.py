"""exchange_splits through dist.all_to_all with one row of counts per rank (lists of equal
tensors) instead of all_to_all_single.
"""
EDITS = {
    "exchange_splits": [
        (r'''    sent = counts.contiguous()
    received = torch.empty_like(sent)
    dist.all_to_all_single(received, sent, group=group)
    return received
''',
         r'''    rows = [row.contiguous() for row in counts.unbind(0)]
    got = [torch.empty_like(row) for row in rows]
    dist.all_to_all(got, rows, group=group)
    return torch.stack(got)
'''),
    ],
}
