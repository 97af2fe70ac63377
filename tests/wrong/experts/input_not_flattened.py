r"""forward routes x [..., d] as if it were [T, d]: a batched input is never flattened to tokens.

EXPECT: ExpertParallelMoE_batched.*phase forward: rank \d.*in forward.*x has leading batch dims here.*x\.reshape\(-1, d\)
CLASS: values
WORLD_SIZES: 1 2
ONLY: ExpertParallelMoE_batched

Only a check with a 3-D input shows it (E10 finding M22).
"""

EDITS = {
    "ExpertParallelMoE.forward": [
        (r'''        x = x.reshape(-1, shape[-1])
''',
         r'''
'''),
    ],
}
