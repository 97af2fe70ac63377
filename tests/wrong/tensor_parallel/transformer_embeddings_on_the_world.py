r"""parallelize_transformer builds BERT's embeddings without `group`: they split and gather over
the whole world, right until the model lives on a subgroup (as each tensor-parallel group of
2D parallelism does).

EXPECT: parallelize_transformer_subgroup .*(structure/tok_emb\.weight has shape \(96, 16\), expected \(96, 24\)|ran on ranks \[0, 1, 2\]; this call belongs to the group of ranks \[0, 2\]|rank\(s\) 1 finished this check while the others wait).*rule 'Group'
CLASS: subgroup
RULE: Group
WORLD_SIZES: 3
ONLY: parallelize_transformer_subgroup
"""

# The bug, as edits of the reference solution (solutions/tensor_parallel.py):
EDITS = {
    "parallelize_transformer": [
        (r'''        model.tok_emb = ParallelEmbedding.from_serial(model.tok_emb, group)
        model.pos_emb = ParallelEmbedding.from_serial(model.pos_emb, group)
''',
         r'''        model.tok_emb = ParallelEmbedding.from_serial(model.tok_emb)
        model.pos_emb = ParallelEmbedding.from_serial(model.pos_emb)
'''),
    ],
}
