"""`nacdrive expert eval`: how well an expert drives, over fixed seeds."""

from __future__ import annotations

import argparse
from pathlib import Path

from agents.evaluation.expert_eval import ExpertEvalConfig
from agents.experts.ppo import PPOTrainConfig
from scripts.args import add_scenario_flag
from scripts.options import add_fields, field_values


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
    eval_names = add_fields(e, ExpertEvalConfig, skip=("scenario",))
    add_scenario_flag(e, "the expert")
    e.add_argument("--json", type=Path, metavar="FILE", help="write the figures and per-episode returns as JSON")
    e.set_defaults(func=run_eval, fields=eval_names)

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
    train_names = add_fields(t, PPOTrainConfig)
    t.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    t.set_defaults(func=run_train, fields=train_names)


def run_train(args: argparse.Namespace) -> int:
    from agents.experts.ppo import train_ppo

    r = train_ppo(PPOTrainConfig(**field_values(args, args.fields)), resume=args.resume)
    print(f"PPO: {r['timesteps']} steps; expert exported to {r['expert']}; evaluate it with "
          f"'nacdrive expert eval --expert ppo --model {r['out']}{'' if r['continuous'] else ' --discrete'}'")
    return 0


def run_eval(args: argparse.Namespace) -> int:
    from agents.evaluation.expert_eval import evaluate_expert
    from nac.checkpoint import write_json

    r = evaluate_expert(ExpertEvalConfig(**field_values(args, args.fields), scenario=args.scenario))
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
