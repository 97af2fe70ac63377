"""The MNIST convolutional net of the RTP tutorial (the classic PyTorch MNIST example).

[B, 1, 28, 28] -> conv 3x3 (32) -> ReLU -> conv 3x3 (64) -> ReLU -> max-pool 2
-> dropout -> flatten [B, 9216] -> fc (128) -> ReLU -> dropout -> fc (10)
-> log-probabilities [B, 10]. 1,199,882 parameters, almost all in fc1.
`channels`, `hidden` and `image` scale it down (the checker's CNN: the same layers,
small enough to compare quickly); the defaults are the tutorial's.
"""
import torch
import torch.nn.functional as F
from torch import nn


class MnistCNN(nn.Module):
    def __init__(self, dropout1: float = 0.25, dropout2: float = 0.5, channels=(32, 64),
                 hidden: int = 128, image: int = 28):
        super().__init__()
        self.config = dict(dropout1=dropout1, dropout2=dropout2, channels=tuple(channels),
                           hidden=hidden, image=image)
        side = (image - 4) // 2                              # two 3x3 convs, a 2x2 pool
        self.conv1 = nn.Conv2d(1, channels[0], 3, 1)         # 28x28 -> 26x26
        self.conv2 = nn.Conv2d(channels[0], channels[1], 3, 1)   # 26x26 -> 24x24, pooled to 12x12
        self.dropout1 = nn.Dropout(dropout1)
        self.dropout2 = nn.Dropout(dropout2)
        self.fc1 = nn.Linear(channels[1] * side * side, hidden)  # 9216 = 64 * 12 * 12
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = self.dropout1(F.max_pool2d(x, 2))
        x = F.relu(self.fc1(torch.flatten(x, 1)))
        x = self.fc2(self.dropout2(x))
        return F.log_softmax(x, dim=1)
