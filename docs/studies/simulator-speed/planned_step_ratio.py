"""A planned step of the discrete track expert over gymnasium CarRacing-v3's step, measured in one process:
run from a checkout (PYTHONPATH=that checkout) to compare commits on one machine."""
import time
import gymnasium as gym
import numpy as np
from agents.carracing.env import make_env
from agents.experts import make_expert

gym_env = gym.make("CarRacing-v3", continuous=False)
env = make_env(False, pixels=False)
plan, step = [], []
for seed in (0, 1):
    gym_env.reset(seed=seed)
    env.reset(seed=seed)
    expert = make_expert("track", env)
    expert.reset()
    for t in range(300):
        t0 = time.perf_counter()
        a = expert.select_action(None)
        plan.append(time.perf_counter() - t0)
        env.step(a)
        t0 = time.perf_counter()
        gym_env.step(a)
        step.append(time.perf_counter() - t0)
p, s = np.median(plan) * 1e3, np.median(step) * 1e3
print(f"planned step p50 {p:.3f} ms, gymnasium step p50 {s:.3f} ms: {s / p:.2f} gymnasium steps per planned step")
