"""The GPT-like language model of the RTP benchmarks (fairscale's transformer_lm style).

tokens [B, S] -> embedding * sqrt(ninp) + sinusoidal positions -> dropout
-> num_decoder_layers x DecoderLayer (causal self-attention, post-LayerNorm)
-> decoder Linear -> logits [B, S, vocab].

The attention layers are PyTorch's own ``nn.MultiheadAttention`` (batch_first):
the RTP wrapper must handle that module, packed q/k/v weights included.
"""
import math

import torch
import torch.nn.functional as F
from torch import nn

from .layers import causal_mask


def sinusoidal_positions(seq_len: int, dim: int) -> torch.Tensor:
    """[seq_len, dim]: sin on even columns, cos on odd ones, wavelengths 2*pi .. 10000*2*pi."""
    position = torch.arange(seq_len, dtype=torch.float32).unsqueeze(1)
    frequency = torch.exp(torch.arange(0, dim, 2, dtype=torch.float32) * (-math.log(10000.0) / dim))
    table = torch.zeros(seq_len, dim)
    table[:, 0::2] = torch.sin(position * frequency)
    table[:, 1::2] = torch.cos(position * frequency)
    return table


ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


class DecoderLayer(nn.Module):
    """Post-LN block, the arrangement of ``nn.TransformerEncoderLayer`` (ReLU by default):

        x = norm1(x + dropout1(self_attn(x, causal)))
        x = norm2(x + dropout2(linear2(dropout(relu(linear1(x))))))

    ``activation="gelu"`` has no kink: float32 checks use it, because a ReLU input within
    rounding of 0 takes the other branch when a correct parallel sum runs in another order,
    and a gradient then jumps (about one draw in a few hundred).
    """

    def __init__(self, ninp: int, nhead: int, nhid: int, dropout: float = 0.0,
                 activation: str = "relu"):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation {activation!r}: choose one of {sorted(ACTIVATIONS)}")
        self.activation = activation
        self.self_attn = nn.MultiheadAttention(ninp, nhead, dropout=dropout, batch_first=True)
        self.self_attn.causal = True   # read by layers.attention_weights
        self.linear1 = nn.Linear(ninp, nhid)
        self.linear2 = nn.Linear(nhid, ninp)
        self.norm1 = nn.LayerNorm(ninp)
        self.norm2 = nn.LayerNorm(ninp)
        self.dropout = nn.Dropout(dropout)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mask = causal_mask(x.shape[1], x.device)
        attended = self.self_attn(x, x, x, attn_mask=mask, need_weights=False)[0]
        x = self.norm1(x + self.dropout1(attended))
        hidden = self.dropout(ACTIVATIONS[self.activation](self.linear1(x)))
        return self.norm2(x + self.dropout2(self.linear2(hidden)))


class TransformerLM(nn.Module):
    def __init__(self, vocab_size: int = 512, ninp: int = 64, nhid: int = 128, nhead: int = 4,
                 num_decoder_layers: int = 2, seq_len: int = 32, dropout: float = 0.0,
                 initrange: float = 0.1, activation: str = "relu"):
        super().__init__()
        self.config = dict(vocab_size=vocab_size, ninp=ninp, nhid=nhid, nhead=nhead,
                           num_decoder_layers=num_decoder_layers, seq_len=seq_len,
                           dropout=dropout, initrange=initrange, activation=activation)
        self.ninp = ninp
        self.embedding = nn.Embedding(vocab_size, ninp)
        self.register_buffer("pos_encoding", sinusoidal_positions(seq_len, ninp))
        self.dropout = nn.Dropout(dropout)
        self.layers = nn.ModuleList(
            DecoderLayer(ninp, nhead, nhid, dropout, activation) for _ in range(num_decoder_layers))
        self.decoder = nn.Linear(ninp, vocab_size)
        nn.init.uniform_(self.embedding.weight, -initrange, initrange)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens: LongTensor [B, S], S <= seq_len. Returns logits [B, S, vocab_size]."""
        x = self.embedding(tokens) * math.sqrt(self.ninp)
        x = self.dropout(x + self.pos_encoding[: tokens.shape[1]])
        for layer in self.layers:
            x = layer(x)
        return self.decoder(x)


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross entropy over every position: logits [B, S, V], targets [B, S]."""
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
