"""`nacdrive quickstart`: the README's main job."""

from __future__ import annotations

import argparse

from agents.carracing.seeds import CHECK_SEED, HELD_OUT_SEED
from agents.quickstart import DISCRETE_TARGETS, QuickstartConfig, recipe_for
from nac.heads import head_names
from scripts.args import add_gap_flags, add_scenario_flag, non_negative_float, non_negative_int, positive_float, positive_int


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "quickstart",
        help="record demonstrations, train a NAC policy, DAgger, evaluate, video, report (about 10 min on 2 CPU cores)",
        description=(
            "From nothing to a CNN + NAC policy driving CarRacing-v3: records demonstrations with the privileged "
            "track expert, behaviour-clones the policy on CPU, runs two DAgger rounds, evaluates it on held-out "
            "seeds beside the expert, records an evaluation video and writes OUT/report.md. Nothing is downloaded. Run it again to continue "
            "after an interruption."
        ),
    )
    p.add_argument("--out", default="runs/quickstart", help="output folder (default runs/quickstart)")
    p.add_argument("--head", default="nac", choices=head_names(), help="sequence head to train (default nac)")
    p.add_argument("--discrete", action="store_true", help="5 discrete actions instead of continuous (steer, gas, brake); the policy comes near "
                   "the expert on most training seeds, not all yet (docs/studies/discrete-heads/README.md, 'Discrete actions')")
    p.add_argument("--discrete-target", choices=DISCRETE_TARGETS, help="with --discrete, what the network learns: wheel (default), the "
                   "front-wheel angle the expert plans and the expert's target speed, driven by the pulse that steers the wheels there "
                   "and braking on the speed bar's speed above the target; rates, each action's rate over the steps t-R..t+R, driven by pulsing at those rates; actions, the "
                   "expert's action itself, driven by argmax")
    p.add_argument("--rate-window", type=positive_int, help="with --discrete-target rates: R (default 4)")
    p.add_argument("--turn-weight", type=non_negative_float, default=QuickstartConfig.turn_weight, metavar="W",
                   help="with --discrete (the wheel target): weight the wheel angle's error by 1 + W x how fast the expert's plan "
                   f"turns there (see 'nacdrive train --help'; default {QuickstartConfig.turn_weight:g})")
    p.add_argument("--episodes", type=positive_int, help="expert demonstrations (default 50; 30 with --discrete, whose expert plans)")
    p.add_argument("--train-epochs", type=positive_int, help="behaviour-cloning epochs (default 1; 6 with --discrete)")
    p.add_argument("--lr", type=positive_float, help="Adam learning rate, behaviour cloning and DAgger (default 3e-4; 1e-4 with --discrete)")
    p.add_argument("--val-fraction", type=positive_float, default=QuickstartConfig.val_fraction, help="share of the demonstrations held "
                   f"out for validation, which chooses the best weights (default {QuickstartConfig.val_fraction:g}; at least one demonstration)")
    p.add_argument("--train-minutes", type=positive_float, help="stop behaviour cloning after this many minutes (default: no cap, "
                   "so that the recipe is the same on any machine)")
    add_gap_flags(p)
    p.add_argument("--dagger-rounds", type=positive_int, default=2, help="DAgger rounds (default 2)")
    p.add_argument("--dagger-until", type=non_negative_float, default=QuickstartConfig.dagger_until, metavar="RETURN",
                   help="then one more round while the last round's clean rollouts average below RETURN, or its trained weights, driving "
                        f"--dagger-check episodes alone, do or lose a track, up to --dagger-max-rounds (default {QuickstartConfig.dagger_until:g}; 0: exactly --dagger-rounds; see 'nacdrive dagger --help')")
    p.add_argument("--dagger-check", type=non_negative_int, default=QuickstartConfig.dagger_check, metavar="N",
                   help=f"with --dagger-until, the episodes those weights drive for it (seeds {CHECK_SEED}..; default {QuickstartConfig.dagger_check}; "
                        "0: the rollouts alone, as 'nacdrive dagger --check 0')")
    p.add_argument("--dagger-max-rounds", type=positive_int, metavar="N", help="with --dagger-until, the most DAgger rounds in all "
                   "(default: --dagger-rounds + 2; + 1 with --discrete)")
    p.add_argument("--dagger-episodes", type=positive_int, default=10, help="DAgger rollouts per round (default 10)")
    p.add_argument("--dagger-average", type=positive_int, metavar="K", help="the policy's weights are the mean of the last K DAgger "
                   "rounds' own, from round 2 on (see 'nacdrive dagger --help'; default 1; 3 with --discrete)")
    p.add_argument("--dagger-epochs", type=positive_int, help="training epochs after each DAgger round (default 1; 2 with --discrete)")
    p.add_argument("--dagger-beta", type=float, help="DAgger round r executes the expert's action with probability beta**r "
                   f"(default {recipe_for(True, 'nac')['dagger_beta']:g}; {recipe_for(False, 'nac')['dagger_beta']:g} with --discrete; 0: the "
                   "policy drives alone)")
    p.add_argument("--dagger-takeover", type=non_negative_float, default=QuickstartConfig.dagger_takeover, metavar="U",
                   help="the expert takes over a DAgger rollout while the car is more than U u/s over its target speed, has a wheel "
                        f"off the road or has stalled (see 'nacdrive dagger --help'; default {QuickstartConfig.dagger_takeover:g}, 0: never)")
    p.add_argument("--dagger-perturb", default=QuickstartConfig.dagger_perturb, metavar="KIND=LEVEL",
                   help="the policy drives half the DAgger rollouts under this perturbation (see 'nacdrive dagger --help'; default "
                        f"{QuickstartConfig.dagger_perturb}: the run's own frame gaps, jitter=3 for NAC's gap mix; none: never)")
    p.add_argument("--dagger-minutes", type=positive_float, help="stop each round's training after this many minutes (default: no cap)")
    p.add_argument("--eval-episodes", type=positive_int, default=10, help="held-out evaluation episodes (default 10)")
    add_scenario_flag(p, "the held-out seeds as well (one leaderboard each in the report, beside the clean one)", repeat=True)
    p.add_argument("--workers", type=non_negative_int, default=0, help="processes for driving (default: up to 2)")
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed of the whole job: demonstrations from seed 1000*S, training and "
                   f"DAgger seeds (default 0); the held-out evaluation seeds stay {HELD_OUT_SEED}..")
    p.add_argument("--max-steps", type=positive_int, default=1000, help=argparse.SUPPRESS)  # tests: short episodes
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from agents.quickstart import quickstart
    from scripts.args import UserError

    if args.discrete_target is not None and not args.discrete:
        raise UserError("--discrete-target is for --discrete (continuous actions are learned as they are)")
    if args.rate_window is not None and args.discrete_target != "rates":
        raise UserError("--rate-window is for --discrete --discrete-target rates (the window of the learned action rates)")
    if args.turn_weight and not (args.discrete and args.discrete_target in (None, "wheel")):
        raise UserError("--turn-weight weights the learned wheel angle's error: it is for --discrete with the wheel target (the default)")

    cfg = QuickstartConfig(
        out=args.out, head=args.head, continuous=not args.discrete, episodes=args.episodes,
        train_epochs=args.train_epochs, lr=args.lr, val_fraction=args.val_fraction, train_minutes=args.train_minutes, stride_jitter=args.stride_jitter, regular_share=args.regular_share, dagger_rounds=args.dagger_rounds,
        dagger_until=args.dagger_until, dagger_check=args.dagger_check, dagger_max_rounds=args.dagger_max_rounds, dagger_episodes=args.dagger_episodes,
        dagger_epochs=args.dagger_epochs, dagger_average=args.dagger_average, dagger_minutes=args.dagger_minutes, dagger_beta=args.dagger_beta, dagger_takeover=args.dagger_takeover, dagger_perturb=args.dagger_perturb,
        turn_weight=args.turn_weight, eval_episodes=args.eval_episodes, scenarios=args.scenario, workers=args.workers, max_steps=args.max_steps, seed=args.seed,
        **{k: v for k, v in (("discrete_target", args.discrete_target), ("rate_window", args.rate_window)) if v is not None},  # None: the default
    )
    result = quickstart(cfg)
    print("\n" + open(result["report"]).read())
    print(f"Done in {result['timings']['total'] / 60:.1f} min. Report: {result['report']}")
    return 0
