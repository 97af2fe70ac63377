r"""The attention's boolean mask is turned into an additive one with torch.zeros(shape, dtype)
and no device: on a GPU run it is in CPU memory, and adding it to the scores fails there.

EXPECT: mixes a \[[\d, ]+\] float64 tensor made without a device \(at flyweight.py:\d+ in _additive\).*hint: rule 'Device'
CLASS: device
WORLD_SIZES: 2
ONLY: TransformerLM
RULE: Device
"""
BASE = "simple"
EDITS = {
    "_additive": [
        (r'''        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(''',
         r'''        return torch.zeros(mask.shape, dtype=dtype).masked_fill('''),
    ],
}
