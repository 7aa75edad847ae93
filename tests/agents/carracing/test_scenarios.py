"""The generalization scenarios: each one's definition pinned on frames and colours, drawn alike by
both renderers, taken from the episode's seed, and the track expert driving each as it drives clean."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from agents.carracing.env import make_env
from agents.experts import make_expert
from agents.carracing.perturb import Level, parse_level
from agents.driving.rollout import run_episode
from agents.carracing.scenarios import BACKGROUND, BLOB_COLOUR, ROAD, SCENARIOS
from nac.config import ConfigError

SEED = 10003
GAS = np.array([0.0, 0.4, 0.0], np.float32)


def _frames(scenario: str, steps: int = 60, renderer: str = "direct", seed: int = SEED, action=GAS) -> tuple[gym.Env, list[np.ndarray]]:
    env = make_env(True, renderer=renderer, scenario=scenario)
    obs, _ = env.reset(seed=seed)
    frames = [obs]
    for _ in range(steps):
        frames.append(env.step(action)[0])
    return env, frames


def test_color_shifts_road_and_grass_by_one_scalar_each_from_the_seed():
    shifts = []
    for seed in (1, 2, 3):
        u = make_env(True, scenario="color").unwrapped
        u.reset(seed=seed)
        road, grass = u.road_color - ROAD, u.bg_color - BACKGROUND
        assert np.ptp(road) < 1e-9 and np.ptp(grass) < 1e-9  # one scalar on every channel
        assert abs(road[0]) <= 0.2 * 255 and abs(grass[0]) <= 0.2 * 255
        assert list(u.grass_color) == [102, 230, 102]  # the lighter squares keep theirs
        assert all(np.ptp(t.color - u.road_color) < 1e-9 and 0 <= (t.color - u.road_color)[0] <= 5.1 + 1e-9 for t in u.road)  # the tiles take it
        shifts.append((road[0], grass[0]))
    assert len(set(shifts)) == 3
    again = make_env(True, scenario="color").unwrapped
    again.reset(seed=1)
    assert (again.road_color[0] - 102, again.bg_color[0] - 102) == pytest.approx(shifts[0])


def test_color3_shifts_each_channel_within_the_range():
    u = make_env(True, scenario="color3").unwrapped
    u.reset(seed=5)
    road, grass = u.road_color - ROAD, u.bg_color - BACKGROUND
    assert np.ptp(road) > 0 and np.ptp(grass) > 0 and np.abs(np.r_[road, grass]).max() <= 0.2 * 255


@pytest.mark.parametrize("scenario", ["color", "bar", "blob", "noise"])
def test_a_scenario_keeps_the_clean_track_and_physics(scenario):
    clean, _ = _frames("clean", 40)
    env, _ = _frames(scenario, 40)
    a, b = clean.unwrapped, env.unwrapped
    assert a.track == b.track and tuple(a.car.hull.position) == tuple(b.car.hull.position) and a.reward == b.reward


def test_the_colour_scenarios_show_their_colours():
    _, frames = _frames("color", 60)
    env = make_env(True, scenario="color").unwrapped
    env.reset(seed=SEED)
    grass = np.round(env.bg_color).astype(int)
    pixels = frames[-1][:84].reshape(-1, 3).astype(int)
    assert (np.abs(pixels - grass).max(axis=1) <= 2).mean() > 0.05  # the background's new colour fills part of the scene


def test_bars_are_black_where_defined_and_nowhere_else():
    for renderer in ("direct", "gymnasium"):
        _, clean = _frames("clean", 60, renderer)
        _, bars = _frames("bar", 60, renderer)
        for c, b in zip(clean[55:], bars[55:]):
            assert (b[:84, :7] == 0).all() and (b[:84, 89:] == 0).all()  # 3/40 of 96 columns = 7.2 on each side
            differ = np.abs(c.astype(int) - b.astype(int)).max(axis=2) > 0
            rows, cols = np.nonzero(differ)
            assert rows.max() < 84 and set(cols) <= {*range(8), *range(88, 96)}
            assert (b[84:] == c[84:]).all()  # the instrument strip untouched


def test_the_blob_rides_with_the_car():
    steer = np.array([0.6, 0.3, 0.0], np.float32)  # turning: the world rotates in the frame, the blob does not
    env, frames = _frames("blob", 120, action=steer)
    _, clean = _frames("clean", 120, action=steer)
    red = np.array(BLOB_COLOUR)
    centres = []
    for f, c in zip(frames[60:], clean[60:]):  # after the opening zoom
        blob = (np.abs(f.astype(int) - red).max(axis=2) <= 10) & (np.abs(c.astype(int) - red).max(axis=2) > 10)
        ys, xs = np.nonzero(blob)
        assert 120 <= len(ys) <= 260  # 8 x 8 world units at 1.56 x 1.94 pixels each: about 190 pixels, its edges blended
        centres.append((ys.mean(), xs.mean()))
    centres = np.array(centres)
    assert np.ptp(centres, axis=0).max() < 1.0  # fixed in the car's frame
    # 25 units right of the car's centre and 11.6 ahead (the rear fixture's corner (1, -2.4) plus (20, 10), half the side),
    # from the car's place in the frame (column 48, row 72) at 16.2 window pixels a unit, the 1000 x 800 window squeezed to 96 x 96
    across, down = 2.7 * 6 * 96 / 1000, 2.7 * 6 * 96 / 800
    assert centres.mean(axis=0) == pytest.approx([72 - 11.6 * down, 48 + 25 * across], abs=1.0)


def test_noise_replaces_the_grass_afresh_every_frame_and_leaves_the_road():
    _, frames = _frames("noise", 62)
    _, clean = _frames("clean", 62)
    _, again = _frames("noise", 62)
    a, b = frames[-2].astype(int), frames[-1].astype(int)
    road = np.abs(clean[-1].astype(int) - ROAD.astype(int)).max(axis=2) <= 3  # the clean frame's road pixels
    grass = (np.abs(clean[-1].astype(int) - [102, 204, 102]).max(axis=2) <= 3) | (np.abs(clean[-1].astype(int) - [102, 230, 102]).max(axis=2) <= 3)
    assert grass[:84].mean() > 0.2 and road[:84].mean() > 0.1
    inner = np.zeros_like(road)
    inner[4:80, 4:92] = True
    changed = np.abs(a - b).max(axis=2) > 30
    assert changed[grass & inner].mean() > 0.8  # the grass is drawn afresh
    assert (np.abs(b - clean[-1].astype(int)).max(axis=2)[road & inner] <= 40).mean() > 0.9  # the road is not noise
    assert all((x == y).all() for x, y in zip(frames, again))  # every draw from the episode's seed
    assert b[:84][grass[:84]].std() > 45  # uniform noise over 0..255 (std 74, less where the frame averages neighbouring cells)


def test_photos_replace_the_grass_with_photographs_drawn_by_the_seed_and_leave_the_road(monkeypatch):
    import socket

    def offline(*args, **kwargs):  # the photographs ship inside scikit-image's wheel: nothing is downloaded
        raise AssertionError("the photos scenario reached for the network")

    monkeypatch.setattr(socket, "socket", offline)
    env, frames = _frames("photos", 62)
    _, clean = _frames("clean", 62)
    _, again = _frames("photos", 62)
    a, b = frames[-2].astype(int), frames[-1].astype(int)
    road = np.abs(clean[-1].astype(int) - ROAD.astype(int)).max(axis=2) <= 3
    grass = (np.abs(clean[-1].astype(int) - [102, 204, 102]).max(axis=2) <= 3) | (np.abs(clean[-1].astype(int) - [102, 230, 102]).max(axis=2) <= 3)
    assert grass[:84].mean() > 0.2 and road[:84].mean() > 0.1
    not_green = np.abs(b - [102, 204, 102]).max(axis=2) > 40
    assert not_green[:84][grass[:84]].mean() > 0.8  # the grass is a photograph, not green
    assert (np.abs(b - clean[-1].astype(int)).max(axis=2)[road] <= 40).mean() > 0.9  # the road is the clean frame's
    assert all((x == y).all() for x, y in zip(frames, again))  # every draw from the episode's seed
    assert (np.abs(a - b).max(axis=2) > 30)[:84][grass[:84]].mean() < 0.5  # fixed in the world: not redrawn as noise is
    mosaic = env.unwrapped.scenario.mosaic
    other = make_env(True, scenario="photos")
    other.reset(seed=SEED + 1)
    assert mosaic.shape == other.unwrapped.scenario.mosaic.shape and not np.array_equal(mosaic, other.unwrapped.scenario.mosaic)


def test_domain_randomize_is_gymnasiums_own():
    ours = make_env(True, scenario="domain-randomize").unwrapped
    theirs = gym.make("CarRacing-v3", continuous=True, domain_randomize=True).unwrapped
    for seed in (1, 2):
        ours.reset(seed=seed)
        theirs.reset(seed=seed)
        for name in ("road_color", "bg_color", "grass_color"):
            assert np.array_equal(getattr(ours, name), getattr(theirs, name))
        assert ours.track == theirs.track


@pytest.mark.parametrize("scenario", ["color", "color3", "bar", "blob", "photos"])
def test_both_renderers_draw_a_scenario_alike(scenario):
    _, direct = _frames(scenario, 60, "direct")
    _, gymnasium = _frames(scenario, 60, "gymnasium")
    diff = np.abs(direct[-1].astype(int) - gymnasium[-1].astype(int))
    assert diff.mean() < 1.5


def test_the_track_expert_drives_every_scenario_as_it_drives_clean():
    def episode(scenario, pixels, steps):
        env = make_env(True, steps, pixels=pixels, scenario=scenario)
        return run_episode(env, make_expert("track", env), SEED), env.unwrapped

    clean, u = episode("clean", True, 150)
    for scenario in ("color", "color3", "bar", "blob", "noise"):
        r, v = episode(scenario, True, 150)
        assert r.episode_return == clean.episode_return and tuple(v.car.hull.position) == tuple(u.car.hull.position)
    full, _ = episode("domain-randomize", False, 1000)  # its own track: a lap as on clean tracks
    assert full.lap_finished and full.episode_return > 900


def test_levels_name_a_scenario_a_perturbation_or_both():
    assert parse_level("none") == Level()
    assert parse_level("color") == Level("color", None)
    assert parse_level("drop=0.2") == Level("clean", "drop=0.2")
    assert parse_level("noise+noise=0.1") == Level("noise", "noise=0.1")  # the scenario, then pixel noise on top
    for bad, message in (("colour", "unknown scenario or perturbation 'colour'"), ("color+bar", "two scenarios"),
                         ("drop=0.1+jitter=2", "two perturbations"), ("drop=2", "out of range")):
        with pytest.raises(ConfigError, match=message):
            parse_level(bad)
    with pytest.raises(ConfigError, match="choose from " + ", ".join(SCENARIOS)):
        make_env(True, scenario="fog")
