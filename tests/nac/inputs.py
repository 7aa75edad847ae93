"""Inputs the NAC layer's tests share."""

import torch


def sequence(b: int = 2, t: int = 12, d: int = 16, seed: int = 0) -> torch.Tensor:
    """A seeded random batch of b sequences of t steps of d features."""
    return torch.randn(b, t, d, generator=torch.Generator().manual_seed(seed))
