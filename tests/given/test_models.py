"""The serial reference models: shapes, parameter counts, and attention against PyTorch's own."""
import pytest
import torch
from torch import nn

from rtp_course.models import (TINY_CONFIGS, AttentionWeights, BertClassifier, DecoderLayer,
                               EncoderBlock, MnistCNN, SelfAttention, TransformerLM,
                               attention_forward, attention_weights, build_model, causal_mask,
                               lm_loss)

B, S, E, H = 3, 6, 24, 4


def _close(actual, expected):
    torch.testing.assert_close(actual, expected, rtol=1e-10, atol=1e-10)


# ------------------------------------------------------------------ attention

@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("batch_first", [True, False])
def test_attention_forward_reproduces_multihead_attention(causal, bias, batch_first):
    torch.manual_seed(0)
    mha = nn.MultiheadAttention(E, H, bias=bias, batch_first=batch_first).double()
    with torch.no_grad():   # nonzero biases, so a bias mix-up shows
        for p in mha.parameters():
            p.normal_(0, 0.3)
    mha.causal = causal
    x = torch.randn(B, S, E, dtype=torch.float64)
    mask = causal_mask(S) if causal else None
    inp = x if batch_first else x.transpose(0, 1)
    expected = mha(inp, inp, inp, attn_mask=mask, need_weights=False)[0]
    if not batch_first:
        expected = expected.transpose(0, 1)
    w = attention_weights(mha)
    assert isinstance(w, AttentionWeights)
    assert (w.num_heads, w.batch_first, w.causal) == (H, batch_first, causal)
    assert (w.bq is None) == (not bias) and w.wq.shape == (E, E) and w.wo.shape == (E, E)
    _close(attention_forward(x, w), expected)
    if causal:   # need_mask overrides the flag
        _close(attention_forward(x, w._replace(causal=False), need_mask=True), expected)


@pytest.mark.parametrize("causal", [False, True])
def test_self_attention_matches_multihead_attention_with_same_weights(causal):
    torch.manual_seed(1)
    ours = SelfAttention(E, H, causal=causal).double()
    assert (ours.num_heads, ours.head_dim, ours.causal) == (H, E // H, causal)
    mha = nn.MultiheadAttention(E, H, batch_first=True).double()
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight,
                                            ours.v_proj.weight]))
        mha.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        mha.out_proj.load_state_dict(ours.out_proj.state_dict())
    x = torch.randn(B, S, E, dtype=torch.float64)
    expected = mha(x, x, x, attn_mask=causal_mask(S) if causal else None, need_weights=False)[0]
    _close(ours(x), expected)
    _close(attention_forward(x, attention_weights(ours)), expected)


def test_attention_weights_are_views_so_gradients_reach_the_module():
    torch.manual_seed(2)
    mha = nn.MultiheadAttention(E, H, batch_first=True).double()
    x = torch.randn(B, S, E, dtype=torch.float64)
    mha(x, x, x, need_weights=False)[0].square().sum().backward()
    expected = {n: p.grad.clone() for n, p in mha.named_parameters()}
    mha.zero_grad()
    w = attention_weights(mha)
    assert w.wk.data_ptr() == mha.in_proj_weight.data_ptr() + E * E * 8   # 2nd block, no copy
    attention_forward(x, w).square().sum().backward()
    for name, p in mha.named_parameters():
        _close(p.grad, expected[name])


def test_attention_forward_on_head_shards_sums_to_the_full_output():
    # The tensor-parallel identity: heads split in 2, out_proj split by columns, bias added once.
    torch.manual_seed(3)
    w = attention_weights(SelfAttention(E, H, causal=True).double())
    x = torch.randn(B, S, E, dtype=torch.float64)
    half = E // 2

    def shard(i):
        rows = slice(i * half, (i + 1) * half)
        return AttentionWeights(w.wq[rows], w.bq[rows], w.wk[rows], w.bk[rows], w.wv[rows],
                                w.bv[rows], w.wo[:, rows], w.bo if i == 0 else None,
                                H // 2, True, True)
    _close(attention_forward(x, shard(0)) + attention_forward(x, shard(1)), attention_forward(x, w))


def test_attention_weights_rejects_other_modules():
    with pytest.raises(TypeError):
        attention_weights(nn.Linear(2, 2))


# ------------------------------------------------------------------ blocks

def _in_proj_from(attn):
    return (torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]),
            torch.cat([attn.q_proj.bias, attn.k_proj.bias, attn.v_proj.bias]))


@pytest.mark.parametrize("causal", [False, True])
def test_encoder_block_is_a_pre_layernorm_gelu_block(causal):
    torch.manual_seed(4)
    ours = EncoderBlock(E, H, 4 * E, causal=causal).double()
    ref = nn.TransformerEncoderLayer(E, H, 4 * E, dropout=0.0, activation="gelu",
                                     batch_first=True, norm_first=True).double()
    weight, bias = _in_proj_from(ours.attn)
    ref.load_state_dict({
        "self_attn.in_proj_weight": weight, "self_attn.in_proj_bias": bias,
        "self_attn.out_proj.weight": ours.attn.out_proj.weight,
        "self_attn.out_proj.bias": ours.attn.out_proj.bias,
        "linear1.weight": ours.mlp.fc1.weight, "linear1.bias": ours.mlp.fc1.bias,
        "linear2.weight": ours.mlp.fc2.weight, "linear2.bias": ours.mlp.fc2.bias,
        "norm1.weight": ours.ln1.weight, "norm1.bias": ours.ln1.bias,
        "norm2.weight": ours.ln2.weight, "norm2.bias": ours.ln2.bias})
    ref.train()   # the training path, not the fused inference fast path
    x = torch.randn(B, S, E, dtype=torch.float64)
    expected = ref(x, src_mask=causal_mask(S) if causal else None)
    torch.testing.assert_close(ours(x), expected)


def test_decoder_layer_is_a_post_layernorm_relu_causal_block():
    torch.manual_seed(5)
    ours = DecoderLayer(E, H, 2 * E).double()
    ref = nn.TransformerEncoderLayer(E, H, 2 * E, dropout=0.0, batch_first=True).double()
    ref.load_state_dict(ours.state_dict())    # same parameter names by design
    x = torch.randn(B, S, E, dtype=torch.float64)
    torch.testing.assert_close(ours(x), ref(x, src_mask=causal_mask(S)))
    assert attention_weights(ours.self_attn).causal


# ------------------------------------------------------------------ models

def test_cnn_is_the_tutorial_net():
    model = MnistCNN()
    assert sum(p.numel() for p in model.parameters()) == 1_199_882
    assert model.fc1.in_features == 9216 and model.dropout1.p == 0.25 and model.dropout2.p == 0.5
    out = model.eval()(torch.randn(2, 1, 28, 28))
    assert out.shape == (2, 10)
    torch.testing.assert_close(out.exp().sum(1), torch.ones(2))   # log-probabilities


def test_bert_classifier_shapes_and_config():
    model = BertClassifier(vocab_size=50, hidden_dim=16, num_layers=3, num_heads=2,
                           num_classes=5, max_seq_len=10, ffn_mult=2)
    assert len(model.blocks) == 3 and model.blocks[0].mlp.fc1.out_features == 32
    assert model.pos_emb.num_embeddings == 10 and model.head.out_features == 5
    assert model(torch.randint(0, 50, (4, 7))).shape == (4, 5)
    assert BertClassifier(**model.config).config == model.config


def test_bert_head_reads_the_mean_over_the_sequence():
    torch.manual_seed(6)
    model = BertClassifier(vocab_size=20, hidden_dim=8, num_layers=1, num_heads=2).double()
    tokens = torch.randint(0, 20, (2, 5))
    captured = {}
    model.ln_f.register_forward_hook(lambda mod, inp, out: captured.update(out=out))
    logits = model(tokens)
    _close(logits, model.head(captured["out"].mean(dim=1)))


def test_transformer_lm_shapes_init_and_causality():
    torch.manual_seed(7)
    model = TransformerLM(vocab_size=40, ninp=16, nhid=24, nhead=4, num_decoder_layers=3,
                          seq_len=8, initrange=0.05)
    assert len(model.layers) == 3 and model.pos_encoding.shape == (8, 16)
    assert "pos_encoding" in dict(model.named_buffers())
    assert model.embedding.weight.abs().max() <= 0.05 and model.decoder.weight.abs().max() <= 0.05
    assert model.decoder.bias.abs().max() == 0
    assert model.layers[0].self_attn.batch_first
    assert TransformerLM(**model.config).config == model.config
    tokens = torch.randint(0, 40, (2, 8))
    logits = model(tokens)
    assert logits.shape == (2, 8, 40)
    changed = tokens.clone()
    changed[:, 5] = (changed[:, 5] + 1) % 40
    other = model(changed)
    torch.testing.assert_close(other[:, :5], logits[:, :5])    # the past does not see the future
    assert not torch.allclose(other[:, 5:], logits[:, 5:])


def test_lm_loss_is_cross_entropy_over_all_positions():
    logits = torch.randn(2, 3, 5)
    targets = torch.randint(0, 5, (2, 3))
    manual = -logits.log_softmax(-1).gather(-1, targets.unsqueeze(-1)).mean()
    torch.testing.assert_close(lm_loss(logits, targets), manual)


def test_build_model_by_name_with_seed():
    torch.manual_seed(123)
    before = torch.rand(1)
    torch.manual_seed(123)
    a = build_model("lm", seed=5, tiny=True)
    assert torch.rand(1) == before            # global RNG untouched
    b = build_model("lm", seed=5, tiny=True)
    c = build_model("lm", seed=6, tiny=True)
    for (name, p), q, r in zip(a.named_parameters(), b.parameters(), c.parameters()):
        assert torch.equal(p, q), name
    assert not all(torch.equal(p, r) for p, r in zip(a.parameters(), c.parameters()))
    assert isinstance(build_model("bert", num_layers=1), BertClassifier)
    assert build_model("cnn", tiny=True).dropout1.p == 0.0
    assert build_model("bert", tiny=True, num_layers=1).config["hidden_dim"] == 48
    with pytest.raises(ValueError):
        build_model("resnet")


def test_tiny_configs_shard_evenly_over_1_to_4_ranks():
    bert, lm = TINY_CONFIGS["bert"], TINY_CONFIGS["lm"]
    sizes = [bert["vocab_size"], bert["hidden_dim"], bert["num_heads"],
             bert["hidden_dim"] * bert["ffn_mult"], lm["vocab_size"], lm["ninp"], lm["nhid"],
             lm["nhead"]]
    for n in (1, 2, 3, 4):
        assert all(size % n == 0 for size in sizes), n
    assert bert["hidden_dim"] % bert["num_heads"] == 0 and lm["ninp"] % lm["nhead"] == 0
    tokens = torch.randint(0, 96, (2, bert["max_seq_len"]))
    assert build_model("bert", tiny=True)(tokens).shape == (2, bert["num_classes"])
    assert build_model("lm", tiny=True)(tokens[:, :lm["seq_len"]]).shape == (2, lm["seq_len"], 96)
    with pytest.raises(ValueError):
        SelfAttention(10, 4)   # heads must divide hidden


def test_the_lm_takes_a_kinkless_activation_for_float32_checks():
    relu = build_model("lm", seed=3, tiny=True)
    gelu = build_model("lm", seed=3, tiny=True, activation="gelu")
    tokens = torch.randint(0, 96, (2, 5), generator=torch.Generator().manual_seed(0))
    assert gelu.config["activation"] == "gelu" and relu.config["activation"] == "relu"
    assert not torch.allclose(relu(tokens), gelu(tokens))
    with pytest.raises(ValueError, match="choose one of"):
        build_model("lm", tiny=True, activation="tanh")
