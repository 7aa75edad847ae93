"""The wheels of a discrete car (agents.carracing.wheel): the speed bar read off a frame, and the wheel decoder on
tensors as on arrays."""

import numpy as np
import pytest

from agents.carracing.env import make_env
from agents.carracing.state import car_state
from agents.carracing.wheel import frame_speed
from agents.experts import make_expert


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
