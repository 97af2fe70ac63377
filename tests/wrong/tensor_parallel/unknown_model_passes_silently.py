r"""parallelize_transformer returns a model it does not know unchanged, instead of raising the promised TypeError.

EXPECT: FAIL  \[E3\.6\] tensor_parallel\.parallelize_transformer_rejects_cnn .*parallelize_transformer\(MnistCNN\) raises.*TypeError
SAYS: tensor_parallel.parallelize_transformer_rejects_cnn:
CLASS: values
WORLD_SIZES: 2
ONLY: parallelize_transformer_rejects_cnn
RULE: Raises

A wrong implementation: solutions/tensor_parallel.py with this one bug.
"""

# The bug, as edits of the reference solution (solutions/tensor_parallel.py):
EDITS = {
    "parallelize_transformer": [
        (r'''    else:
        raise TypeError(f"parallelize_transformer: expected a BertClassifier or TransformerLM, "
                        f"got {type(model).__name__}")
''',
         r'''
'''),
    ],
}
