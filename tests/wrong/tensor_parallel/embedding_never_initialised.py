r"""A fresh ParallelEmbedding's shard is allocated with torch.empty and never initialised.

EXPECT: fresh_layers.*init/embedding weight std.*N\(0, 1\), like nn.Embedding
CLASS: init
WORLD_SIZES: 2
ONLY: fresh_layers
HIDDEN: yes
"""

# The bug, as edits of the reference solution (solutions/tensor_parallel.py):
EDITS = {
    "ParallelEmbedding.__init__": [
        (r'''        self.weight = nn.Parameter(torch.randn(num_embeddings, local, device=device, dtype=dtype))
        if padding_idx is not None:''',
         r'''        self.weight = nn.Parameter(torch.empty(num_embeddings, local, device=device, dtype=dtype))
        if padding_idx is not None:'''),
    ],
}
