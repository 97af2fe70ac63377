"""How often float32 rounding flips a gradient of the LM's float32 model check, ReLU vs GELU.

A correct parallel run sums in another order than the serial reference, so its float32
activations differ by rounding. Where the model has a kink (ReLU at 0), an input within that
rounding of the kink takes the other branch and a gradient jumps: the check fails a correct
submission on that draw of the data. This script trains the check's serial reference twice
per fresh draw, the second time with noise of `scale` x mean|y| added to every Linear output
(a stand-in for rounding), and counts draws whose step-1 gradients jump (beyond the float32
tolerance by more than 1e-2). Rounding is ~1e-7 relative; larger scales measure the rate
faster, and it scales linearly in `scale` where kinks cause it.

    python scripts/float32_kinks.py --activation relu --scale 1e-5 --draws 400
    python scripts/float32_kinks.py --activation gelu --scale 1e-5 --draws 400
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "helpers"))

from hidden.flyweight import RTPTransformerLMFloat32  # noqa: E402  (instructor edition)
from rtp_course.checker import inputs  # noqa: E402
from rtp_course.checker.public import flyweight_layout  # noqa: E402
from rtp_course.checker.verdict import TOLERANCE  # noqa: E402
from rtp_course.models import build_model  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--activation", choices=["relu", "gelu"], default="relu")
    ap.add_argument("--scale", type=float, default=1e-5)
    ap.add_argument("--draws", type=int, default=400)
    args = ap.parse_args()
    torch.set_num_threads(1)

    class Check(RTPTransformerLMFloat32):
        def build(self):
            return build_model("lm", tiny=True, activation=args.activation)

    check, members = Check(), [0, 1, 2]
    rtol, atol = TOLERANCE[torch.float32]
    plain = torch.nn.Linear.forward

    def noisy(self, x):
        y = plain(self, x)
        return y + args.scale * y.abs().mean() * torch.randn_like(y)

    jumps = 0
    for _ in range(args.draws):
        inputs.forget()                     # a fresh master key: a fresh draw of the data
        flyweight_layout._TRACES.clear()
        a = flyweight_layout._train(check, members)["grads"]
        torch.nn.Linear.forward = noisy
        try:
            b = flyweight_layout._train(check, members)["grads"]
        finally:
            torch.nn.Linear.forward = plain
        worst = max(((a[k] - b[k]).abs() - atol - rtol * a[k].abs()).max().item() for k in a)
        jumps += worst > 1e-2
    print(f"{args.activation}, noise {args.scale:g}: a gradient jumped on {jumps} of "
          f"{args.draws} draws")


if __name__ == "__main__":
    main()
