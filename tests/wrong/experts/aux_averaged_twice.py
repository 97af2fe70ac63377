r"""The aux loss is divided by the group size in forward "to average it", as sync_gradients does.

EXPECT: ExpertParallelMoE.*aux loss.*no averaging
CLASS: values
WORLD_SIZES: 2
ONLY: ExpertParallelMoE
"""

EDITS = {
    "ExpertParallelMoE.forward": [
        (r'''        return y.reshape(shape), serial.load_balancing_loss(probs, r.expert)
''',
         r'''        return y.reshape(shape), serial.load_balancing_loss(probs, r.expert) / world
'''),
    ],
}
