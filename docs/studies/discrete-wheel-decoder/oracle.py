"""The wheel decoder fed the planning expert's own outputs: how far the decoder alone falls short of the expert.

The discrete track expert drives as usual (it plans from the car's state); the car executes instead the action
agents.carracing.wheel.WheelDecoder takes from the expert's planned wheel angle and speed excess, as a perfect
wheel-angle network would give them. Run from the repository's root:

    python docs/studies/discrete-wheel-decoder/oracle.py 230 40 > oracle-230.json
"""

import json
import sys

from agents.carracing.env import WheelDecoder, make_env, sharpest_bend
from agents.driving.rollout import run_episode
from agents.experts.track import TrackFollowingExpert


class Decoded:
    """The expert's plan, driven through a decoder of the given horizon (0: the expert's own actions)."""

    def __init__(self, expert: TrackFollowingExpert, horizon: int) -> None:
        self.expert, self.horizon = expert, horizon

    def reset(self) -> None:
        self.expert.reset()
        self.decoder = WheelDecoder(horizon=self.horizon) if self.horizon else None

    def select_action(self, obs):
        action = self.expert.select_action(obs)
        if self.decoder is None:
            return action
        return self.decoder(self.expert.planned_wheel_angle, self.expert.speed_excess)


def main() -> None:
    first, count = int(sys.argv[1]), int(sys.argv[2])
    env = make_env(False, pixels=False)
    expert = TrackFollowingExpert(env)
    out = {"seeds": list(range(first, first + count)), "bend": [], "episodes": {}}
    for seed in out["seeds"]:
        env.reset(seed=seed)
        out["bend"].append(round(sharpest_bend(env), 1))
    for horizon in (0, 1, 2, 3, 4):
        name = "expert" if horizon == 0 else f"horizon {horizon}"
        out["episodes"][name] = [
            (r.episode_return, r.length, r.lap_finished) for r in (run_episode(env, Decoded(expert, horizon), s) for s in out["seeds"])
        ]
        print(name, file=sys.stderr, flush=True)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
