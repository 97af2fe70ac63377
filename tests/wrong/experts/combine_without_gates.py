r"""The combine adds the experts' rows without multiplying by their gates.

EXPECT: ExpertParallelMoE.*forward/output.*gate
CLASS: values
WORLD_SIZES: 2
ONLY: ExpertParallelMoE
"""

EDITS = {
    "ExpertParallelMoE.forward": [
        (r'''        y = x.new_zeros(x.shape).index_add(0, t, r.gate[t, j].unsqueeze(1) * back)
''',
         r'''        y = x.new_zeros(x.shape).index_add(0, t, back)
'''),
    ],
}
