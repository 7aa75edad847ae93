"""The direct renderer draws frames close to gymnasium's, the instrument strip within one level."""

import numpy as np
import pytest

from agents.carracing.env import make_env
from agents.experts import make_expert
from agents.carracing.render import FRAME, STRIP_ROWS, DirectRenderer, draw_strip, strip_parts
from nac.config import ConfigError


def _lockstep(seed: int, steps: int, randomize: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """The same episode in two environments, gymnasium's renderer and the direct one: (steps, 96, 96, 3) each.
    The expert drives (tiles are recoloured when touched), then full lock spins the car off the road."""
    exact = make_env(True, renderer="gymnasium").unwrapped
    direct = make_env(True).unwrapped
    frames = []
    for env in (exact, direct):
        env.domain_randomize = randomize
    obs_e, _ = exact.reset(seed=seed)
    obs_d, _ = direct.reset(seed=seed)
    expert = make_expert("track", exact)
    expert.reset()
    for t in range(steps):
        action = expert.select_action(None) if t < steps * 2 // 3 else np.array([1.0, 0.6, 0.0], np.float32)
        frames.append((exact.step(action)[0], direct.step(action)[0]))
    exact.close()
    direct.close()
    e, d = (np.stack(f) for f in zip(*frames))
    return e, d


@pytest.mark.parametrize("seed, randomize", [(0, False), (7, True)])
def test_direct_frames_are_within_the_stated_tolerance_of_gymnasiums(seed, randomize):
    exact, direct = _lockstep(seed, 180, randomize)
    diff = np.abs(exact.astype(np.int16) - direct.astype(np.int16))  # (T, 96, 96, 3)
    scene = diff[:, : FRAME - STRIP_ROWS]
    # the scene: polygon edges fall on a coarser grid; the mean error per channel stays below one level
    assert scene.mean(axis=(0, 1, 2)).max() < 1.0, scene.mean(axis=(0, 1, 2))
    assert (scene.max(axis=3) > 0).mean() < 0.15  # most pixels are the very same
    # the instrument strip (speed bar, ABS, steering, gyro, score) is drawn at gymnasium's resolution
    assert diff[:, FRAME - STRIP_ROWS:].max() <= 1
    # the opening zoom (the first second) is drawn as well: black beyond the playfield, every polygon
    assert np.abs(exact[:10].astype(int) - direct[:10].astype(int)).mean() < 2.0


def test_the_scale_and_the_renderer_are_checked():
    with pytest.raises(ValueError, match="scale must be one of 3, 5, 6"):
        DirectRenderer(4)
    with pytest.raises(ConfigError, match="renderer must be one of direct, gymnasium"):
        make_env(True, renderer="fast")


def test_a_finer_scale_is_closer():
    env = make_env(True, renderer="gymnasium")
    obs, _ = env.reset(seed=2)
    expert = make_expert("track", env)
    expert.reset()
    errors = {3: [], 6: []}
    renderers = {k: DirectRenderer(k) for k in errors}  # the default (6) and the coarsest
    for t in range(120):
        u = env.unwrapped
        action = expert.select_action(obs)
        obs = env.step(action)[0]
        if t >= 60 and t % 5 == 0:
            for k, r in renderers.items():
                errors[k].append(np.abs(r.frame(u)[:84].astype(int) - obs[:84].astype(int)).mean())
    assert np.mean(errors[6]) < np.mean(errors[3])


def test_the_strip_put_together_from_its_parts_is_the_strip_drawn_whole():
    """Each instrument part is scaled alone and kept; side by side they must be the strip drawn whole, bit for bit,
    and where two parts reach the same frame columns (a wide spin) the strip is drawn whole."""
    env = make_env(True, pixels=False).unwrapped
    env.reset(seed=3)
    expert = make_expert("track", env)
    expert.reset()
    renderer = DirectRenderer()
    for t in range(240):  # the expert, then full lock: bars of every length, the score changing
        env.step(expert.select_action(None) if t < 160 else np.array([1.0, 0.6, 0.0], np.float32))
        strip = renderer.frame(env)[FRAME - STRIP_ROWS:]
        np.testing.assert_array_equal(strip, draw_strip([key for key, _, _ in strip_parts(env)]))
    env.car.hull.angularVelocity = 30.0  # the gyro bar now reaches back across the ABS bars
    spans = sorted((first, last) for _, first, last in strip_parts(env))
    assert any(a[1] >= b[0] for a, b in zip(spans, spans[1:]))
    strip = renderer.frame(env)[FRAME - STRIP_ROWS:]
    np.testing.assert_array_equal(strip, draw_strip([key for key, _, _ in strip_parts(env)]))


def test_the_driving_network_knows_the_instrument_strips_rows():
    """DrivingNetConfig.strip_rows (the rows its contrast input leaves as they are) is the renderer's strip."""
    from nac.driving import DrivingNetConfig

    assert DrivingNetConfig().strip_rows == STRIP_ROWS


@pytest.mark.parametrize("turn", [0.0, 1.0])
def test_the_car_sits_where_the_contrast_from_ahead_expects_it(turn):
    """DrivingNetConfig.contrast_from="ahead" reads the colour in front of the car at a fixed place in the frame
    (nac.driving.ahead_patch): the car is drawn at rows 67..76, columns 46..49, however its wheels turn, and the
    patch lies just ahead of it; on a straight start it is the road's grey."""
    from nac.driving import ahead_patch

    env = make_env(continuous=True)
    env.reset(seed=10100)
    for _ in range(60):  # past the first second's zoom
        frame, *_ = env.step(np.array([turn, 0.2, 0.0], np.float32))
    hull = (frame[..., 0] > 150) & (frame[..., 1] < 60)  # the car's red (the kerbs' red lies elsewhere)
    rows, cols = np.nonzero(hull[60:FRAME - STRIP_ROWS, 40:56])
    rows, cols = rows + 60, cols + 40
    assert rows.min() == 67 and 75 <= rows.max() <= 76 and cols.min() == 46 and cols.max() == 49  # the wheels turn a row
    ahead_rows, ahead_cols = ahead_patch(FRAME)
    assert (ahead_rows, ahead_cols) == (slice(57, 65), slice(44, 52))
    assert ahead_rows.stop < rows.min() and ahead_cols.start < cols.min() and ahead_cols.stop > cols.max()
    if not turn:
        patch = frame[ahead_rows, ahead_cols].reshape(-1, 3)
        assert (np.median(patch, axis=0) == np.median(patch, axis=0)[0]).all()  # grey: the road
