r"""The aux loss is all-reduced and averaged over the ranks in forward (sync averages it again).

EXPECT: rule 'Communication'.*forward makes all-to-alls only
CLASS: traffic values
RULE: Communication
WORLD_SIZES: 2
"""

EDITS = {
    "ExpertParallelMoE.forward": [
        (r'''        return y.reshape(shape), serial.load_balancing_loss(probs, r.expert)
''',
         r'''        aux = serial.load_balancing_loss(probs, r.expert)
        mean = aux.detach().clone()
        dist.all_reduce(mean, group=self.group)
        return y.reshape(shape), aux - aux.detach() + mean / world
'''),
    ],
}
