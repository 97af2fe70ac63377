r"""AllToAll hands x to the all-to-all as it came, a transposed view (NCCL refuses it).

EXPECT: AllToAll.*non-contiguous.*rule 'Contiguity'
CLASS: contiguity
RULE: Contiguity
WORLD_SIZES: 2
"""

EDITS = {
    "AllToAll.forward": [
        (r'''        dist.all_to_all_single(out, x.contiguous(), list(output_splits), list(input_splits),
''',
         r'''        dist.all_to_all_single(out, x, list(output_splits), list(input_splits),
'''),
    ],
}
