"""Memory accounting, checked against numbers computed by hand."""
import pytest
import torch
from torch import nn

from rtp_course.training.memory import (MemoryBreakdown, activation_bytes, buffer_bytes, grad_bytes,
                               human_bytes, measure, optimizer_state_bytes, param_bytes, sharded,
                               tensor_bytes, training_memory, transformer_activation_bytes)


def test_tensor_bytes():
    assert tensor_bytes(torch.zeros(3, 5)) == 60                      # 15 float32
    assert tensor_bytes(torch.zeros(7, dtype=torch.float16)) == 14
    assert tensor_bytes(torch.zeros(2, dtype=torch.int64)) == 16
    assert tensor_bytes(None) == 0


def test_params_grads_and_adam_state_of_a_linear_layer():
    layer = nn.Linear(4, 3)                         # 12 weights + 3 biases = 15 floats = 60 B
    opt = torch.optim.Adam(layer.parameters())
    assert param_bytes(layer) == 60
    assert grad_bytes(layer) == 0 and optimizer_state_bytes(opt) == 0   # nothing yet
    layer(torch.randn(2, 4)).sum().backward()
    opt.step()
    assert grad_bytes(layer) == 60
    assert optimizer_state_bytes(opt) == 120        # exp_avg + exp_avg_sq
    assert optimizer_state_bytes(opt, include_scalars=True) == 128   # + two float32 `step`s
    b = measure(layer, opt)
    assert (b.parameters, b.gradients, b.optimizer, b.activations, b.buffers) == (60, 60, 120, 0, 0)
    assert b.total == 240 and b["total"] == 240 and b.as_dict()["optimizer"] == 120


def test_sgd_momentum_state_and_shared_parameters_count_once():
    emb = nn.Embedding(10, 4)
    tied = nn.ModuleDict({"emb": emb, "out": nn.Linear(4, 10, bias=False)})
    tied["out"].weight = emb.weight                 # weight tying: one 40-float tensor
    assert param_bytes(tied) == 160
    opt = torch.optim.SGD(tied.parameters(), lr=0.1, momentum=0.9)
    tied["out"](tied["emb"](torch.tensor([1, 2]))).sum().backward()
    opt.step()
    assert optimizer_state_bytes(opt) == 160        # one momentum buffer


def test_buffers_are_counted_separately():
    norm = nn.BatchNorm1d(3)   # params: weight, bias; buffers: mean, var (float32), count (int64)
    assert param_bytes(norm) == 24 and buffer_bytes(norm) == 3 * 4 + 3 * 4 + 8
    assert measure(norm).as_dict() == {"parameters": 24, "gradients": 0, "optimizer": 0,
                                       "activations": 0, "buffers": 32, "communication": 0,
                                       "total": 56}


def test_activation_bytes_of_a_small_mlp():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    x = torch.randn(5, 4)
    # Saved for backward: x for the first weight's gradient (5*4 floats = 80 B); the ReLU
    # output, saved by the ReLU and by the second Linear, one storage (5*8 floats = 160 B).
    # Weights are saved too but are parameters, not activations.
    assert activation_bytes(model, x) == 240
    with torch.no_grad():
        assert activation_bytes(model, x) == 0
    frozen = nn.Linear(4, 8).requires_grad_(False)
    assert activation_bytes(frozen, x) == 0         # nothing needs a gradient


def test_training_memory_of_a_trillion_parameters():
    # Mixed-precision Adam: fp16 weights 2 B + fp16 grads 2 B + fp32 (momentum 4 B +
    # variance 4 B + master weights 4 B) = 16 B per parameter.
    b = training_memory(1e12)
    assert b.parameters == 2_000_000_000_000
    assert b.gradients == 2_000_000_000_000
    assert b.optimizer == 12_000_000_000_000
    assert b.total == 16_000_000_000_000 and human_bytes(b.total) == "16.0 TB"
    # The "2 + 2 + 2x2 TB" count, with fp16 Adam states and no master copy.
    assert training_memory(1e12, state_dtype_bytes=2, master_weights=False).total == 8 * 10**12
    # Full fp32: no master copy needed. 4 + 4 + 8 = 16 B again.
    fp32 = training_memory(1000, param_dtype_bytes=4, grad_dtype_bytes=4)
    assert (fp32.parameters, fp32.gradients, fp32.optimizer) == (4000, 4000, 8000)
    assert training_memory(1000, optimizer="sgd", master_weights=False).optimizer == 0


def test_korthikanti_activation_estimate():
    s, b, h, layers, a = 2048, 128, 12288, 120, 96
    sbh = 2048 * 128 * 12288                        # 3_221_225_472
    assert sbh == 3_221_225_472
    # 5*a*s/h = 5*96*2048/12288 = 80, so each layer keeps sbh * (34 + 80) bytes.
    assert transformer_activation_bytes(s, b, h, layers, a) == 120 * 114 * 3_221_225_472
    assert human_bytes(120 * 114 * 3_221_225_472) == "44.1 TB"
    # fp32 doubles it; TP over 8 ranks: 10 + 24/8 + 80/8 = 23 per layer.
    assert transformer_activation_bytes(s, b, h, layers, a, bytes_per_value=4) == \
        2 * 120 * 114 * 3_221_225_472
    assert transformer_activation_bytes(s, b, h, layers, a, tensor_parallel=8) == \
        120 * 23 * 3_221_225_472


def test_sharded_per_rank_bytes():
    full = MemoryBreakdown(parameters=1600, gradients=1600, optimizer=3200, activations=100,
                           buffers=10)
    rows = {s: sharded(full, 4, s, largest_layer_bytes=400).as_dict()
            for s in ("ddp", "zero1", "zero2", "fsdp", "tp", "rtp")}
    keys = ("parameters", "gradients", "optimizer", "activations", "buffers", "communication")
    assert [rows["ddp"][k] for k in keys] == [1600, 1600, 3200, 100, 10, 0]
    assert [rows["zero1"][k] for k in keys] == [1600, 1600, 800, 100, 10, 0]
    assert [rows["zero2"][k] for k in keys] == [1600, 400, 800, 100, 10, 0]
    assert [rows["fsdp"][k] for k in keys] == [400, 400, 800, 100, 10, 800]   # a whole layer
    assert [rows["tp"][k] for k in keys] == [400, 400, 800, 100, 10, 0]
    assert [rows["rtp"][k] for k in keys] == [400, 400, 800, 100, 10, 200]    # one shard
    assert sharded(full.as_dict(), 3, "fsdp").parameters == 534           # ceil(1600 / 3)
    with pytest.raises(ValueError):
        sharded(full, 2, "pipeline")


def test_human_bytes():
    assert human_bytes(0) == "0 B" and human_bytes(999) == "999 B"
    assert human_bytes(1500) == "1.5 KB" and human_bytes(10.8e12) == "10.8 TB"
    assert human_bytes(2 * 1024**3, binary=True) == "2.0 GiB"
