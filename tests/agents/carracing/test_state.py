"""The car's privileged state (agents.carracing.state): read from the simulator, not from the frame."""

import numpy as np

from agents.carracing.env import make_env
from agents.carracing.state import STATE_FIELDS, car_state


def test_the_state_is_the_simulators_car_and_follows_it():
    env = make_env(continuous=True, pixels=False)
    env.reset(seed=5)
    start = car_state(env)
    x, y = env.unwrapped.car.hull.position
    assert (start.x, start.y, start.speed) == (float(x), float(y), 0.0) and start.track_tiles == len(env.unwrapped.track)
    assert start.tiles_visited == env.unwrapped.tile_visited_count  # the tiles under the car at the start count already
    for _ in range(60):
        env.step(np.array([0.5, 1.0, 0.0], dtype=np.float32))  # gas, steering left
    moved = car_state(env)
    assert moved.speed > 5.0 and np.hypot(moved.x - start.x, moved.y - start.y) > 5.0
    assert moved.wheel_angle < 0.0 or moved.wheel_angle > 0.0  # the front wheels turned
    assert 0.0 < moved.progress < 1.0 and moved.progress == moved.tiles_visited / moved.track_tiles
    assert list(moved.as_array()) == [np.float32(v) for v in (moved.x, moved.y, moved.angle, moved.speed, moved.wheel_angle, moved.progress)]
    assert STATE_FIELDS[:6] == ("x", "y", "angle", "speed", "wheel_angle", "progress")  # as_array's order, which recordings keep
