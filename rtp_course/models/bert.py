"""A small BERT-like encoder classifier (no dropout, learned positions).

tokens [B, S] -> token + position embeddings [B, S, E] -> pre-LN encoder blocks
-> final LayerNorm -> mean over the sequence [B, E] -> linear head [B, classes].
"""
import torch
from torch import nn

from .layers import EncoderBlock


class BertClassifier(nn.Module):
    def __init__(self, vocab_size: int = 512, hidden_dim: int = 64, num_layers: int = 2,
                 num_heads: int = 4, num_classes: int = 2, max_seq_len: int = 32,
                 ffn_mult: int = 4):
        super().__init__()
        self.config = dict(vocab_size=vocab_size, hidden_dim=hidden_dim, num_layers=num_layers,
                           num_heads=num_heads, num_classes=num_classes,
                           max_seq_len=max_seq_len, ffn_mult=ffn_mult)
        self.tok_emb = nn.Embedding(vocab_size, hidden_dim)
        self.pos_emb = nn.Embedding(max_seq_len, hidden_dim)
        self.blocks = nn.ModuleList(
            EncoderBlock(hidden_dim, num_heads, ffn_mult * hidden_dim) for _ in range(num_layers))
        self.ln_f = nn.LayerNorm(hidden_dim)
        self.head = nn.Linear(hidden_dim, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens: LongTensor [B, S] with S <= max_seq_len. Returns logits [B, num_classes]."""
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok_emb(tokens) + self.pos_emb(positions)      # [B, S, E]
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x).mean(dim=1))
