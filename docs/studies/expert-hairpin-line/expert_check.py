import sys, numpy as np
from agents.carracing.env import make_env, sharpest_bend
from agents.experts.track import TrackFollowingExpert, TrackExpertConfig
from agents.driving.rollout import run_episode
import dataclasses
env = make_env(False, pixels=False)
seeds = range(int(sys.argv[1]), int(sys.argv[1]) + int(sys.argv[2]))
bend = []
for s in seeds:
    env.reset(seed=s); bend.append(sharpest_bend(env))
hp = np.array(bend) >= 150
base = None
for room in (-1.0, 1.5, 0.5):
    cfg = dataclasses.replace(TrackExpertConfig.for_action_space(False), hairpin_room=room)
    ex = TrackFollowingExpert(env, cfg)
    res = np.array([(r.episode_return, r.length, r.lap_finished) for r in (run_episode(env, ex, s) for s in seeds)])
    if base is None: base = res
    print(room, 'mean %.1f laps %d/%d hairpin-track laps %d/%d  len ratio hairpin %.4f other %.4f' % (res[:,0].mean(), res[:,2].sum(), len(res), res[hp,2].sum(), hp.sum(), np.mean(res[hp,1]/base[hp,1]), np.mean(res[~hp,1]/base[~hp,1])), flush=True)
