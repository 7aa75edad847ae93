"""The contrast measured from the colour ahead of the car (net.contrast_from=ahead), unscaled and scaled to the scene,
on a frame 60 steps into a track (steering straight, gas 0.3): the road's median just ahead of the car and the median
over the scene (mostly the background), for the clean track, noise, bar, blob, photos and the domain-randomized tracks
that ra lost. Run from the repository root: python docs/studies/augment-contrast/ahead_contrast.py"""
import numpy as np
import torch

from agents.carracing.env import make_env
from nac.driving import DrivingNet, DrivingNetConfig

NETS = {k: DrivingNet(DrivingNetConfig(action_space="continuous", frame_input=k, contrast_from="ahead")).eval()
        for k in ("rgb+contrast", "rgb+contrast-scaled")}
CASES = [("clean", 10100), ("noise", 10100), ("bar", 10101), ("blob", 10101), ("photos", 10102), ("color", 10101)] + [
    ("domain-randomize", s) for s in (10103, 10104, 10108, 10109)]

print("| scene | track | road | scene median | road, scaled | scene median, scaled |")
print("|---|---|---:|---:|---:|---:|")
for scene, seed in CASES:
    env = make_env(continuous=True, scenario=scene)
    frame, _ = env.reset(seed=seed)
    for _ in range(60):
        frame, *_ = env.step(np.array([0.0, 0.3, 0.0], np.float32))
    x = torch.from_numpy(frame).permute(2, 0, 1)[None].float() / 255
    cells = []
    for net in NETS.values():
        contrast = net.see(x)[0, 3, :84].numpy()
        cells += [f"{np.median(contrast[60:80, 44:52]):.2f}", f"{np.median(contrast):.2f}"]
    print(f"| {scene} | {seed} | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} |")
