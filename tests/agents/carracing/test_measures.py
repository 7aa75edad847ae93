"""Measures of the car's track (agents.carracing.measures): the sharpest bend, and the seeds whose tracks have a hairpin."""

import numpy as np
import pytest

from agents.carracing.env import make_env
from agents.carracing.measures import seeds_with_bend, sharpest_bend, track_bends
from nac import ConfigError


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
    bends = track_bends(list(range(10000, 10010)))
    # measured once by hand from the tracks' unwrapped headings: 10007 holds a hairpin, 10009 none
    assert bends[10007] == pytest.approx(169.4, abs=0.1) and bends[10009] == pytest.approx(120.6, abs=0.1)
    sharp = [s for s in range(10000, 10010) if bends[s] >= 150]
    assert len(sharp) == 4
    assert seeds_with_bend(10000, 2, 150) == sharp[:2] and seeds_with_bend(10000, 2, 150, skip=2) == sharp[2:]
    with pytest.raises(ConfigError, match="only 4 of seeds 10000..10009 have a track bending 150 degrees.*5 wanted"):
        seeds_with_bend(10000, 3, 150, skip=2, scan=10)
