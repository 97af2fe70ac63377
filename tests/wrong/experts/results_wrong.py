r"""Capacity ignored: every choice is kept, so tokens the serial layer drops are computed.

EXPECT: ExpertParallelMoE.*forward/output.*capacity
CLASS: values
RULE: Results
WORLD_SIZES: 2
"""

# The bug, as edits of the reference solution (solutions/experts.py):
EDITS = {
    "ExpertParallelMoE.forward": [
        (r'''        r = serial.route(probs, self.top_k, cap)
''',
         r'''        r = serial.route(probs, self.top_k, None)
'''),
    ],
}
