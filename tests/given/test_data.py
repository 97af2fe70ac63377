"""Synthetic data: shapes, determinism per seed, the rules the models must learn, rank slicing."""
import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader

from rtp_course.training.data import (DigitsDataset, classification_tokens, lm_tokens, rank_batch,
                             synthetic_digits)
from rtp_course.models import MnistCNN


def test_digits_shapes_and_normalization():
    images, labels = synthetic_digits(500, seed=0)
    assert images.shape == (500, 1, 28, 28) and images.dtype == torch.float32
    assert labels.shape == (500,) and labels.dtype == torch.int64
    assert set(labels.tolist()) == set(range(10))
    assert -1.0 < images.mean() < 1.0 and 0.5 < images.std() < 1.5   # roughly like MNIST
    assert images.min() == pytest.approx(-0.1307 / 0.3081, abs=1e-5)  # clamped black background


def test_digits_deterministic_per_seed_and_different_across_seeds():
    a, la = synthetic_digits(20, seed=3)
    b, lb = synthetic_digits(20, seed=3)
    c, _ = synthetic_digits(20, seed=4)
    assert torch.equal(a, b) and torch.equal(la, lb)
    assert not torch.equal(a, c)


def test_digits_dataset_in_a_dataloader():
    data = DigitsDataset(10, seed=1)
    images, labels = synthetic_digits(10, seed=1)
    assert len(data) == 10
    image, label = data[3]
    assert torch.equal(image, images[3]) and label == labels[3]
    xb, yb = next(iter(DataLoader(data, batch_size=4)))
    assert xb.shape == (4, 1, 28, 28) and torch.equal(yb, labels[:4])


def test_digits_are_learnable_by_the_cnn():
    torch.manual_seed(0)
    train_x, train_y = synthetic_digits(32 * 40, seed=1)
    test_x, test_y = synthetic_digits(300, seed=2)
    model = MnistCNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for step in range(40):
        batch = slice(32 * step, 32 * (step + 1))
        loss = F.nll_loss(model(train_x[batch]), train_y[batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
    with torch.no_grad():
        accuracy = (model.eval()(test_x).argmax(1) == test_y).float().mean().item()
    assert accuracy > 0.4, accuracy   # chance is 0.1


@pytest.mark.parametrize("num_classes", [2, 3])
def test_classification_tokens_follow_the_counting_rule(num_classes):
    tokens, labels = classification_tokens(400, 12, 96, seed=0, num_classes=num_classes)
    assert tokens.shape == (400, 12) and labels.shape == (400,)
    assert tokens.dtype == labels.dtype == torch.int64
    assert 0 <= tokens.min() and tokens.max() < 96
    width = 96 // num_classes
    counts = torch.stack([((tokens // width) == c).sum(1) for c in range(num_classes)], 1)
    assert torch.equal(labels, counts.argmax(1))
    share = torch.bincount(labels, minlength=num_classes).float() / 400
    assert share.min() > 0.6 / num_classes   # roughly balanced


def test_classification_tokens_binary_rule_is_upper_half_majority():
    tokens, labels = classification_tokens(200, 9, 50, seed=5)
    upper = (tokens >= 25).sum(1)
    assert torch.equal(labels, (upper > 9 - upper).long())
    again, _ = classification_tokens(200, 9, 50, seed=5)
    other, _ = classification_tokens(200, 9, 50, seed=6)
    assert torch.equal(tokens, again) and not torch.equal(tokens, other)


def test_lm_tokens_are_shifted_noisy_progressions():
    inputs, targets = lm_tokens(300, 10, 64, seed=0)
    assert inputs.shape == targets.shape == (300, 10) and inputs.dtype == torch.int64
    assert torch.equal(inputs[:, 1:], targets[:, :-1])
    assert 0 <= inputs.min() and inputs.max() < 64
    # The next token continues the progression of the last two most of the time.
    predicted = (2 * inputs[:, 1:] - inputs[:, :-1]) % 64
    assert (predicted == targets[:, 1:]).float().mean() > 0.8
    again, _ = lm_tokens(300, 10, 64, seed=0)
    other, _ = lm_tokens(300, 10, 64, seed=1)
    assert torch.equal(inputs, again) and not torch.equal(inputs, other)


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_rank_batch_splits_in_contiguous_pieces(world_size):
    x = torch.arange(12 * 2).view(12, 2)
    y = torch.arange(12)
    pieces = [rank_batch((x, y), r, world_size) for r in range(world_size)]
    assert all(isinstance(p, tuple) and len(p[1]) == 12 // world_size for p in pieces)
    assert torch.equal(torch.cat([p[0] for p in pieces]), x)
    assert torch.equal(pieces[-1][1], y[12 - 12 // world_size:])   # last rank, last piece
    assert torch.equal(rank_batch(y, 0, world_size), y[:12 // world_size])


def test_rank_batch_rejects_uneven_batches_and_bad_ranks():
    with pytest.raises(ValueError):
        rank_batch(torch.zeros(10), 0, 3)
    with pytest.raises(ValueError):
        rank_batch(torch.zeros(12), 3, 3)
