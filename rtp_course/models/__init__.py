"""Serial (single-device) reference models of the course.

Every parallel implementation is checked against these. ``build_model`` makes
one by name; ``TINY_CONFIGS`` are the small shapes the checkers use: hidden
sizes, heads, vocabularies and MLP widths divisible by 1, 2, 3 and 4 so every
world size up to 4 shards them evenly (12 heads = lcm(1, 2, 3, 4)).
"""
from typing import Optional

import torch

from .bert import BertClassifier
from .cnn import MnistCNN
from .layers import (AttentionWeights, EncoderBlock, FeedForward, SelfAttention,
                     attention_forward, attention_weights, causal_mask)
from .transformer_lm import DecoderLayer, TransformerLM, lm_loss

MODELS = {"bert": BertClassifier, "lm": TransformerLM, "cnn": MnistCNN}

TINY_CONFIGS = {
    "bert": dict(vocab_size=96, hidden_dim=48, num_layers=2, num_heads=12, num_classes=12,
                 max_seq_len=12, ffn_mult=4),                 # ffn 192
    "lm": dict(vocab_size=96, ninp=48, nhid=192, nhead=12, num_decoder_layers=2, seq_len=12,
               dropout=0.0),
    # The CNN's shapes are fixed by the tutorial (32 and 64 channels do not split in 3).
    "cnn": dict(dropout1=0.0, dropout2=0.0),
}


def build_model(name: str, seed: Optional[int] = None, tiny: bool = False, **overrides):
    """Build model ``name`` ("bert", "lm" or "cnn").

    Starts from the constructor defaults (or ``TINY_CONFIGS[name]`` when
    ``tiny``), then applies ``overrides``. With ``seed``, initialization uses
    its own generator state, so every rank that passes the same seed builds the
    same weights, and the global RNG is left untouched.
    """
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; choose one of {sorted(MODELS)}")
    config = {**(TINY_CONFIGS[name] if tiny else {}), **overrides}
    if seed is None:
        return MODELS[name](**config)
    with torch.random.fork_rng(devices=[]):   # parameters are drawn on the CPU
        torch.random.default_generator.manual_seed(seed)
        return MODELS[name](**config)


__all__ = [
    "AttentionWeights", "BertClassifier", "DecoderLayer", "EncoderBlock", "FeedForward",
    "MnistCNN", "MODELS", "SelfAttention", "TINY_CONFIGS", "TransformerLM", "attention_forward",
    "attention_weights", "build_model", "causal_mask", "lm_loss",
]
