"""The benchmark's own measuring code."""

import torch

from nac.bench import peak_memory_bytes


def test_peak_memory_counts_the_largest_live_set_not_the_sum():
    def work():
        a = torch.ones(1_000_000)  # 4 MB
        del a
        b = torch.ones(500_000)  # 2 MB, allocated after a is freed
        return b.sum()

    peak = peak_memory_bytes(work)
    assert 4_000_000 <= peak < 5_500_000
