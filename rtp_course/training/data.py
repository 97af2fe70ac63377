"""Synthetic data sets: no downloads, every sample a function of a seed.

* ``synthetic_digits``: MNIST-like 28x28 digit images drawn from a 5x7 font.
* ``classification_tokens``: token sequences whose class is readable from token counts.
* ``lm_tokens``: noisy arithmetic progressions for next-token prediction.
* ``rank_batch``: the course's convention for splitting a global batch over ranks.
"""
import math

import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

# 5 columns x 7 rows per digit; '#' is ink.
_FONT = {
    0: [" ### ", "#   #", "#  ##", "# # #", "##  #", "#   #", " ### "],
    1: ["  #  ", " ##  ", "# #  ", "  #  ", "  #  ", "  #  ", "#####"],
    2: [" ### ", "#   #", "    #", "   # ", "  #  ", " #   ", "#####"],
    3: ["#####", "   # ", "  #  ", "   # ", "    #", "#   #", " ### "],
    4: ["   # ", "  ## ", " # # ", "#  # ", "#####", "   # ", "   # "],
    5: ["#####", "#    ", "#### ", "    #", "    #", "#   #", " ### "],
    6: ["  ## ", " #   ", "#    ", "#### ", "#   #", "#   #", " ### "],
    7: ["#####", "    #", "   # ", "  #  ", " #   ", " #   ", " #   "],
    8: [" ### ", "#   #", "#   #", " ### ", "#   #", "#   #", " ### "],
    9: [" ### ", "#   #", "#   #", " ####", "    #", "   # ", " ##  "],
}


def glyphs() -> torch.Tensor:
    """The ten digits' bitmaps [10, 7, 5], made where the images are (on the host: no device,
    as every tensor here; a module-level constant would be made before a rank starts)."""
    return torch.tensor([[[c == "#" for c in row] for row in _FONT[d]] for d in range(10)],
                        dtype=torch.float32)
MNIST_MEAN, MNIST_STD = 0.1307, 0.3081


def _uniform(n, low, high, gen):
    return low + (high - low) * torch.rand(n, generator=gen)


def synthetic_digits(n: int, seed: int = 0):
    """``n`` digit images: (images [n, 1, 28, 28] float32, labels [n] int64).

    Each glyph is scaled 3x (15x21 pixels), centred, randomly rotated (+-12
    degrees), scaled (0.8-1.15), sheared and shifted (+-3 px), thickened or not,
    dimmed, blurred and given Gaussian noise; then normalized with MNIST's mean
    and standard deviation, as the tutorial's transform does.
    """
    gen = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=gen)
    shapes = glyphs()[labels].unsqueeze(1)                             # [n, 1, 7, 5]
    images = shapes.repeat_interleave(3, dim=2).repeat_interleave(3, dim=3)  # [n, 1, 21, 15]
    images = F.pad(images, (6, 7, 3, 4))                               # [n, 1, 28, 28]

    # Stroke jitter: about half of the digits get thicker strokes.
    thick = torch.rand(n, generator=gen) < 0.5
    dilated = F.max_pool2d(images, 3, stride=1, padding=1)
    images = torch.where(thick.view(n, 1, 1, 1), dilated, images)

    # Random affine map (rotation, scale, shear, shift) applied by resampling.
    angle = _uniform(n, -12, 12, gen) * math.pi / 180
    scale = _uniform(n, 0.8, 1.15, gen)
    shear = _uniform(n, -0.2, 0.2, gen)
    shift = _uniform(2 * n, -3 / 14, 3 / 14, gen).view(n, 2)   # grid units: 14 px = 1.0
    cos, sin = torch.cos(angle) / scale, torch.sin(angle) / scale
    theta = torch.stack([torch.stack([cos, -sin + shear, shift[:, 0]], 1),
                         torch.stack([sin, cos, shift[:, 1]], 1)], 1)    # [n, 2, 3]
    grid = F.affine_grid(theta, list(images.shape), align_corners=False)
    images = F.grid_sample(images, grid, align_corners=False)

    # Ink intensity, a light blur, sensor noise.
    images = images * _uniform(n, 0.7, 1.0, gen).view(n, 1, 1, 1)
    blur = torch.tensor([[1.0, 2.0, 1.0], [2.0, 4.0, 2.0], [1.0, 2.0, 1.0]]).view(1, 1, 3, 3) / 16
    images = F.conv2d(images, blur, padding=1)
    images = images + 0.1 * torch.randn(images.shape, generator=gen)
    images = images.clamp(0.0, 1.0)
    return (images - MNIST_MEAN) / MNIST_STD, labels


class DigitsDataset(Dataset):
    """``synthetic_digits(n, seed)`` as a map-style Dataset of (image [1, 28, 28], label)."""

    def __init__(self, n: int, seed: int = 0):
        self.images, self.labels = synthetic_digits(n, seed)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        return self.images[index], self.labels[index]


def classification_tokens(n: int, seq_len: int, vocab_size: int, seed: int = 0,
                          num_classes: int = 2):
    """``n`` sequences for sequence classification: (tokens [n, seq_len], labels [n]) int64.

    The vocabulary is cut in ``num_classes`` equal ranges; the label is the
    range holding the most tokens of the sequence (ties: the lowest range).
    With 2 classes: label 1 when more tokens fall in the upper half.
    Each sequence draws half its tokens from one chosen range, so labels are
    balanced and a bag-of-tokens model learns the rule quickly.
    """
    if vocab_size < num_classes:
        raise ValueError("need at least one token per class")
    gen = torch.Generator().manual_seed(seed)
    width = vocab_size // num_classes
    favoured = torch.randint(0, num_classes, (n, 1), generator=gen)
    in_range = favoured * width + torch.randint(0, width, (n, seq_len), generator=gen)
    anywhere = torch.randint(0, vocab_size, (n, seq_len), generator=gen)
    tokens = torch.where(torch.rand(n, seq_len, generator=gen) < 0.5, in_range, anywhere)
    ranges = (tokens // width).clamp(max=num_classes - 1)   # leftover tokens join the last range
    counts = F.one_hot(ranges, num_classes).sum(dim=1)      # [n, num_classes]
    return tokens, counts.argmax(dim=1)


def lm_tokens(n: int, seq_len: int, vocab_size: int, seed: int = 0, noise: float = 0.05):
    """``n`` next-token examples: (inputs [n, seq_len], targets [n, seq_len]) int64.

    Each row is an arithmetic progression ``start + t * step (mod vocab)`` with
    step in 1..4; a fraction ``noise`` of the tokens is replaced by random ones.
    ``targets`` is the row shifted by one: ``targets[:, t] == inputs[:, t + 1]``.
    A model that reads the last two tokens predicts most of the next ones.
    """
    gen = torch.Generator().manual_seed(seed)
    start = torch.randint(0, vocab_size, (n, 1), generator=gen)
    step = torch.randint(1, 5, (n, 1), generator=gen)
    rows = (start + step * torch.arange(seq_len + 1)) % vocab_size      # [n, seq_len + 1]
    random_tokens = torch.randint(0, vocab_size, rows.shape, generator=gen)
    rows = torch.where(torch.rand(rows.shape, generator=gen) < noise, random_tokens, rows)
    return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()


def rank_batch(tensors, rank: int, world_size: int):
    """This rank's piece of a global batch: the first dim cut in ``world_size``
    equal contiguous pieces, rank r takes piece r.

    ``tensors`` is a tensor or a tuple/list of tensors with the same first dim;
    the result has the same form. The global batch must divide evenly.
    """
    if isinstance(tensors, (tuple, list)):
        return type(tensors)(rank_batch(t, rank, world_size) for t in tensors)
    total = tensors.shape[0]
    if total % world_size:
        raise ValueError(f"global batch of {total} does not split in {world_size} equal pieces")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is not in 0..{world_size - 1}")
    size = total // world_size
    return tensors[rank * size:(rank + 1) * size]
