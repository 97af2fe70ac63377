r"""AllToAll.backward hands grad_output to the all-to-all as it came: a transposed view.

EXPECT: AllToAll .*phase backward: rank \d raised NCCLRuleError: all_to_all_single was given a non-contiguous .*rule 'Contiguity'.*in backward
CLASS: values
WORLD_SIZES: 2
ONLY: AllToAll

gloo takes some views NCCL refuses; the checker applies NCCL's rule (E10 finding M21).
"""

EDITS = {
    "AllToAll.backward": [
        (r'''        dist.all_to_all_single(dx, grad.contiguous(), input_splits, output_splits,
''',
         r'''        dist.all_to_all_single(dx, grad, input_splits, output_splits,
'''),
    ],
}
