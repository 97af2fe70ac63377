r"""exchange_splits receives the counts into torch.empty without device=: a host tensor.

EXPECT: rule 'Device'.*exchange_splits
CLASS: device
RULE: Device
WORLD_SIZES: 2
"""

EDITS = {
    "exchange_splits": [
        (r'''    received = torch.empty_like(sent)
''',
         r'''    received = torch.empty(sent.shape, dtype=sent.dtype)
'''),
    ],
}
