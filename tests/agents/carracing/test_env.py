"""The faster CarRacing draws gymnasium's frames exactly (renderer "gymnasium"); a policy reads its speed off them."""

import gymnasium as gym
import numpy as np
import pygame
import pytest

from agents.carracing.env import ENV_ID, FAST_ID, make_env
from agents.carracing.measures import seeds_with_bend, sharpest_bend
from agents.carracing.state import car_state
from agents.carracing.wheel import frame_speed
from agents.experts import make_expert
from nac import ConfigError


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


@pytest.mark.parametrize("seed", [3, 11])
def test_the_speed_bar_reads_the_cars_speed_within_1_6_units(seed):
    """The expert drives up to speed, then the brakes stop the car, then gas with full lock spins it
    on the grass: at every frame the bar's reading is within 1.6 u/s of the car's speed (what the
    wheel decoder relies on), over the whole range from standstill."""
    env = make_env(continuous=True)
    obs, _ = env.reset(seed=seed)
    expert = make_expert("track", env)
    expert.reset()
    speeds, errors = [], []
    for t in range(420):
        action = (expert.select_action(obs) if t < 250 else np.array([0.0, 0.0, 0.8], np.float32) if t < 330
                  else np.array([-1.0, 0.5, 0.0], np.float32))
        obs = env.step(action)[0]
        speeds.append(car_state(env).speed)
        errors.append(frame_speed(obs) - speeds[-1])
    assert min(speeds) < 0.5 and max(speeds) > 60  # the range was covered, standstill included
    assert np.abs(errors).max() <= 1.6, f"worst reading error {np.abs(errors).max():.2f} u/s at speed {speeds[int(np.abs(errors).argmax())]:.1f}"
    with pytest.raises(ValueError, match="96 x 96 x 3"):
        frame_speed(obs[:64])


def _track_turning(env, degrees):
    """Give env's track these heading changes (degrees) per segment, starting at heading 0."""
    beta = np.concatenate([[0.0], np.cumsum(np.radians(degrees))[:-1]])
    env.unwrapped.track = [(0.0, b, 0.0, 0.0) for b in beta]


def test_the_sharpest_bend_is_the_largest_heading_change_over_twelve_segments_around_the_loop():
    env = make_env(pixels=False)
    env.reset(seed=0)
    _track_turning(env, [6.0] * 60)  # a circle, 6 degrees a segment
    assert sharpest_bend(env) == pytest.approx(72.0)
    _track_turning(env, [-6.0] * 60)  # the other way round
    assert sharpest_bend(env) == pytest.approx(72.0)
    turns = np.zeros(60)
    turns[np.r_[54:60, 0:6]] = 15.0  # a hairpin of 180 degrees across the track's start
    turns[np.r_[8:26, 30:48]] = 5.0  # and 180 more in gentle bends
    _track_turning(env, turns)
    assert sharpest_bend(env) == pytest.approx(180.0)


def test_hairpin_tracks_are_found_in_seed_order():
    env = make_env(pixels=False)
    bends = {}
    for seed in range(10000, 10010):
        env.reset(seed=seed)
        bends[seed] = sharpest_bend(env)
    # measured once by hand from the tracks' unwrapped headings: 10007 holds a hairpin, 10009 none
    assert bends[10007] == pytest.approx(169.4, abs=0.1) and bends[10009] == pytest.approx(120.6, abs=0.1)
    sharp = [s for s in range(10000, 10010) if bends[s] >= 150]
    assert len(sharp) == 4
    assert seeds_with_bend(10000, 2, 150) == sharp[:2] and seeds_with_bend(10000, 2, 150, skip=2) == sharp[2:]
    with pytest.raises(ConfigError, match="only 4 of seeds 10000..10009 have a track bending 150 degrees.*5 wanted"):
        seeds_with_bend(10000, 3, 150, skip=2, scan=10)


def test_the_wheel_decoder_decodes_tensors_as_it_decodes_arrays():
    """Training decodes a batch's outputs on their device: the same actions as from numpy arrays, ties included."""
    import torch

    from agents.carracing.wheel import wheel_action

    rng = np.random.default_rng(0)
    target, wheel, excess = rng.uniform(-0.5, 0.5, 5000), rng.uniform(-0.45, 0.45, 5000), rng.uniform(-6, 6, 5000)
    target[:500] = wheel[:500]  # gas, right and left tie where the wheels sit at the target
    as_arrays = wheel_action(target, excess, wheel)
    as_tensors = wheel_action(*(torch.from_numpy(a) for a in (target, excess, wheel)))
    assert isinstance(as_tensors, torch.Tensor) and np.array_equal(as_tensors.numpy(), as_arrays)
    assert set(np.unique(as_arrays)) == {0, 1, 2, 3, 4}
