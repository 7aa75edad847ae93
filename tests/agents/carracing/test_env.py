"""The faster CarRacing draws gymnasium's frames exactly (renderer "gymnasium")."""

import gymnasium as gym
import numpy as np
import pygame
import pytest

from agents.carracing.env import ENV_ID, FAST_ID
from agents.experts import make_expert


@pytest.mark.parametrize("angle", [0.0, np.pi / 2, -np.pi / 2, np.pi, 3 * np.pi, 2 * np.pi, 1e-9, 0.7318, -4.2])
def test_the_rotation_is_pygames_to_the_last_bit(angle):
    cos, sin = pygame.math.Vector2(1.0, 0.0).rotate_rad(angle)
    xy = np.random.default_rng(0).uniform(-400, 400, size=(50, 2))
    ours = np.stack([cos * xy[:, 0] - sin * xy[:, 1], sin * xy[:, 0] + cos * xy[:, 1]], axis=1)
    theirs = np.array([tuple(pygame.math.Vector2(*p).rotate_rad(angle)) for p in xy])
    assert np.array_equal(ours, theirs)


@pytest.mark.parametrize("seed, randomize", [(0, False), (7, True)])
def test_frames_are_gymnasiums_bit_for_bit(seed, randomize):
    """The expert drives (tiles change colour when touched), then full lock spins the car off the
    road and around (every heading, the grass at the edge of view): observations and the video
    frame equal gymnasium's CarRacing-v3 at every step checked."""
    kw = dict(continuous=True, max_episode_steps=260, render_mode="rgb_array", domain_randomize=randomize)
    stock, fast = gym.make(ENV_ID, **kw), gym.make(FAST_ID, renderer="gymnasium", **kw)
    assert type(fast.unwrapped) is not type(stock.unwrapped)  # the other renderer is what is compared
    obs, _ = stock.reset(seed=seed)
    assert np.array_equal(obs, fast.reset(seed=seed)[0])
    expert = make_expert("track", stock)
    expert.reset()
    for t in range(250):
        action = expert.select_action(obs) if t < 120 else np.array([1.0, 0.6, 0.0], dtype=np.float32)
        obs = stock.step(action)[0]
        assert np.array_equal(obs, fast.step(action)[0]), f"step {t}"
        if t % 40 == 0:
            assert np.array_equal(stock.render(), fast.render()), f"video frame at step {t}"
    assert stock.unwrapped.tile_visited_count > 10  # tiles were touched and recoloured
