"""`nacdrive expert eval`: how well an expert drives, over fixed seeds."""

from __future__ import annotations

import argparse
from pathlib import Path

from agents.experts import EXPERTS
from scripts.args import add_ray_flag, non_negative_int, positive_int


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("expert", help="evaluate or train the CarRacing experts", description="Experts that drive CarRacing-v3.")
    jobs = p.add_subparsers(dest="job", metavar="JOB", required=True, parser_class=type(p))
    e = jobs.add_parser(
        "eval",
        help="closed-loop returns of an expert over fixed seeds",
        description=(
            "Drives full CarRacing-v3 episodes with an expert on seeds S, S+1, ... and prints the mean, "
            "std, min and 95 percent interval of the returns, the share of episodes >= 900 and of finished laps."
        ),
    )
    e.add_argument("--expert", default="track", choices=EXPERTS, help="which expert (default: track)")
    e.add_argument("--continuous", action="store_true", help="continuous actions (steer, gas, brake) instead of 5 discrete")
    e.add_argument("--episodes", type=positive_int, default=50, help="episodes (default 50)")
    e.add_argument("--seed-start", type=non_negative_int, default=0, help="first seed (default 0)")
    e.add_argument("--workers", type=non_negative_int, default=0, help="worker processes (default: up to 2)")
    add_ray_flag(e, "the episodes")
    e.add_argument("--json", type=Path, metavar="FILE", help="write the figures and per-episode returns as JSON")
    e.add_argument("--model", metavar="PATH", help="the PPO expert: a run folder from 'expert train' or its expert/ folder (default: the shipped one)")
    e.set_defaults(func=run_eval)

    t = jobs.add_parser(
        "train",
        help="train the PPO expert (stable-baselines3, rl-baselines3-zoo settings)",
        description=(
            "SB3 PPO on CarRacing-v3 with rl-baselines3-zoo's settings (frame skip 2, 64x64 grey, 2 stacked frames, "
            "CnnPolicy, lr linear from 1e-4, n_steps 512, batch 128, gSDE, reward normalisation) in SubprocVecEnv "
            "workers, an eval callback on held-out seeds, TensorBoard (OUT/tb), checkpoints (OUT/checkpoints) and "
            "--resume. --warm-start track (default) first behaviour-clones PPO's own policy network on the track "
            "expert's frames through PPO's wrappers, then runs DAgger rounds, so that PPO starts from a driver. "
            "The result is exported to OUT/expert (safetensors + JSON) for '--expert ppo --model OUT'."
        ),
    )
    t.add_argument("--out", required=True, metavar="RUN", help="run folder")
    t.add_argument("--timesteps", type=non_negative_int, default=200_000, help="PPO steps in this run (default 200000)")
    t.add_argument("--envs", type=positive_int, default=8, help="SubprocVecEnv workers (default 8, the zoo's)")
    t.add_argument("--warm-start", default="track", choices=("track", "none"), help="clone the track expert first (default) or not")
    t.add_argument("--warm-steps", type=positive_int, default=20_000, help="expert steps to clone (default 20000)")
    t.add_argument("--dagger-rounds", type=non_negative_int, default=2, help="DAgger rounds before PPO (default 2)")
    t.add_argument("--dagger-steps", type=positive_int, default=10_000, help="steps per DAgger round (default 10000)")
    t.add_argument("--discrete", action="store_true", help="5 discrete actions (no gSDE) instead of continuous")
    t.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    t.set_defaults(func=run_train)


def run_train(args: argparse.Namespace) -> int:
    from agents.experts.ppo import PPOTrainConfig, train_ppo

    cfg = PPOTrainConfig(
        out=args.out, continuous=not args.discrete, timesteps=args.timesteps, envs=args.envs,
        warm_start=None if args.warm_start == "none" else args.warm_start, warm_steps=args.warm_steps,
        dagger_rounds=args.dagger_rounds, dagger_steps=args.dagger_steps,
    )
    r = train_ppo(cfg, resume=args.resume)
    print(f"PPO: {r['timesteps']} steps; expert exported to {r['expert']}; evaluate it with "
          f"'nacdrive expert eval --expert ppo --model {args.out}{'' if args.discrete else ' --continuous'}'")
    return 0


def run_eval(args: argparse.Namespace) -> int:
    from agents.evaluation.expert_eval import ExpertEvalConfig, evaluate_expert
    from nac.checkpoint import write_json

    cfg = ExpertEvalConfig(
        expert=args.expert, continuous=args.continuous, episodes=args.episodes, seed_start=args.seed_start, workers=args.workers, ray=args.ray,
        model=args.model,
    )
    r = evaluate_expert(cfg)
    seeds = f"{r['seeds'][0]}..{r['seeds'][-1]}"
    print(
        f"{r['expert']} expert, {r['action_space']} actions, seeds {seeds}: "
        f"mean {r['mean_return']:.1f} +- {r['std_return']:.1f} (std), min {r['min_return']:.1f}, "
        f"95% CI [{r['ci95_low']:.1f}, {r['ci95_high']:.1f}], solved (>= 900) {r['solved_share']:.0%}, "
        f"laps finished {r['finished_share']:.0%}, steps with a wheel off the road {r['wheels_off_share']:.1%}"
    )
    if args.json:
        write_json(args.json, r)
        print(f"wrote {args.json}")
    return 0
