"""Behaviour cloning's batches (agents.training.batches): a chunk's random shift moves its frames together."""

import numpy as np
import torch

from agents.training import batches


def test_random_shift_moves_a_chunks_frames_together_with_edges_repeated():
    rng = np.random.default_rng(0)
    frames = torch.from_numpy(rng.integers(0, 255, size=(6, 12, 10, 3), dtype=np.uint8))
    # two chunks of two windows each (W = 3): frames 0..3 belong to chunk 0, frames 3..5 to chunk 1
    index = torch.tensor([[0, 1, 2], [1, 2, 3], [3, 4, 5], [4, 5, 5]])
    chunk_of_row = np.array([0, 0, 1, 1])
    chunk = batches.chunk_of_frames(len(frames), index.numpy(), chunk_of_row)
    assert chunk.tolist() == [0, 0, 0, 0, 1, 1]  # frame 3 is first used by chunk 0's second window
    out = batches.shifted(frames, chunk, 3, np.random.default_rng(5))
    dy, dx = np.random.default_rng(5).integers(-3, 4, size=(2, 2))
    assert out.shape == frames.shape and out.dtype == torch.uint8
    padded = np.pad(frames.numpy(), ((0, 0), (3, 3), (3, 3), (0, 0)), mode="edge")
    for u, c in enumerate(chunk):
        crop = padded[u, 3 + dy[c] : 3 + dy[c] + 12, 3 + dx[c] : 3 + dx[c] + 10]
        assert np.array_equal(out[u].numpy(), crop), u
    assert (dy != 0).any() or (dx != 0).any()  # the check above compared real shifts
    assert torch.equal(batches.shifted(frames, chunk, 0, np.random.default_rng(5)), frames)
