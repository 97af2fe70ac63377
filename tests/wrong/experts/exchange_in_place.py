r"""exchange_splits writes the received counts over the caller's counts and returns them.

EXPECT: exchange_splits.*counts after.*rule 'New tensors'
CLASS: in-place
RULE: New tensors
WORLD_SIZES: 2
"""

EDITS = {
    "exchange_splits": [
        (r'''    sent = counts.contiguous()
    received = torch.empty_like(sent)
    dist.all_to_all_single(received, sent, group=group)
    return received
''',
         r'''    dist.all_to_all_single(counts, counts.clone(), group=group)
    return counts
'''),
    ],
}
