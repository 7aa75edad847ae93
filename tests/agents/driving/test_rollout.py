"""Episode statistics: a lap lost to a skipped tile is told apart from one not reached; episodes
stepped together are the episodes driven alone."""

import numpy as np

from agents.carracing.env import make_env
from agents.carracing.measures import skipped_tiles
from agents.experts import make_expert
from agents.driving.policy import DrivingPolicy
from agents.driving.rollout import lost_to_skip, run_episode, run_episodes


class Jumping:
    """The track expert, except that at step `at` the car is moved `jump` tiles ahead along the
    track: it never touches the tiles in between, as when it cuts a hairpin over the grass."""

    def __init__(self, env, at: int, jump: int) -> None:
        self.env, self.expert, self.at, self.jump = env, make_expert("track", env), at, jump

    def reset(self) -> None:
        self.expert.reset()
        self.t = 0

    def select_action(self, obs):
        self.t += 1
        if self.t == self.at:
            u = self.env.unwrapped
            pts = np.array([(t[2], t[3]) for t in u.track])
            i = int(np.argmin(((pts - tuple(u.car.hull.position)) ** 2).sum(1)))
            d = pts[(i + self.jump) % len(pts)] - pts[i]
            for body in (u.car.hull, *u.car.wheels):
                body.position = (body.position[0] + d[0], body.position[1] + d[1])
        return self.expert.select_action(obs)


def test_a_skipped_tile_costs_the_lap_and_is_counted():
    env = make_env(True, max_steps=820, pixels=False)  # the expert laps track 300 in 787 steps
    clean = run_episode(env, make_expert("track", env), 300)
    assert clean.lap_finished and clean.tiles_skipped == 0 and not lost_to_skip(clean.lap_finished, clean.tiles_skipped)
    jumped = run_episode(env, Jumping(env, at=100, jump=6), 300)
    # the car went round the whole track, but the tiles it jumped over were never touched
    assert not jumped.lap_finished and 0.97 < jumped.tiles_visited < 1.0
    assert 1 <= jumped.tiles_skipped <= 6 and lost_to_skip(jumped.lap_finished, jumped.tiles_skipped)
    # given the time, the car comes round again for them and the lap counts
    env = make_env(True, max_steps=1000, pixels=False)
    late = run_episode(env, Jumping(env, at=100, jump=6), 300)
    assert late.lap_finished and late.tiles_skipped == 0 and late.length > clean.length


def test_the_stretch_not_reached_yet_is_not_skipped():
    env = make_env(True, max_steps=150, pixels=False)
    r = run_episode(env, make_expert("track", env), 300)
    assert not r.lap_finished and r.tiles_visited < 0.5 and r.tiles_skipped == 0
    u = env.unwrapped
    for tile in u.road[5:8]:  # three tiles behind the car, as if never touched
        tile.road_visited = False
    assert skipped_tiles(env) == 3


class Veering:
    """Full right lock and some gas from the start: the car leaves the road within a few dozen steps."""

    def reset(self) -> None:
        pass

    def select_action(self, obs):
        return np.array([1.0, 0.3, 0.0], dtype=np.float32)


def test_the_off_road_limit_ends_an_episode_once_the_car_has_been_off_it_long_enough():
    from agents.carracing.measures import OffRoadLimit

    env = OffRoadLimit(make_env(continuous=True, pixels=False), 25)
    offs, ends = [], []
    env.reset(seed=3)
    while True:
        _, _, terminated, truncated, info = env.step(Veering().select_action(None))
        offs.append(all(not w.tiles for w in env.unwrapped.car.wheels))
        if terminated or truncated:
            ends.append(info.get("off_road", False))
            break
    assert ends == [True] and len(offs) < 300
    assert all(offs[-25:]) and not all(offs[-26:])  # exactly 25 steps in a row with every wheel on the grass
    expert_env = OffRoadLimit(make_env(continuous=True, pixels=False), 25)
    result = run_episode(expert_env, make_expert("track", expert_env), seed=3)  # on the road, never cut short
    assert result.lap_finished and result.wheels_off == 0


class _Alone:
    """A DrivingPolicy behind the one-episode contract, reseeded per episode as evaluation does."""

    def __init__(self, policy, seed):
        self.policy, self.seed = policy, seed

    def reset(self):
        self.policy.reset(self.seed)

    def select_action(self, obs):
        return self.policy.select_action(obs)


def test_episodes_stepped_together_are_the_episodes_driven_alone():
    """Three episodes of the shipped NAC policy, one batched forward a step, end exactly as each
    driven alone: every field of their results (return, length, laps, tiles, wheels off the road)."""
    import torch

    torch.set_num_threads(1)
    policy = DrivingPolicy.from_run("agents/pretrained/nac")
    seeds, limits = [10000, 10001, 10002], [120, 80, 150]  # the second ends first and stands by
    alone = [run_episode(make_env(True, n), _Alone(policy, s), s) for s, n in zip(seeds, limits)]
    together = run_episodes([make_env(True, n) for n in limits], policy, seeds)
    assert together == alone
    assert [r.length for r in together] == limits
    assert len({r.episode_return for r in together}) == 3
