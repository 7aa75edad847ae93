"""`nacdrive dagger`: DAgger rounds on a trained run (policy rollouts labelled by the expert)."""

from __future__ import annotations

import argparse

from agents.training.dagger import LOST_TILES, DaggerConfig, check_worst, recipe_beta
from agents.carracing.seeds import CHECK_SEED
from agents.experts import EXPERTS
from scripts.args import add_ray_flag, non_negative_float, non_negative_int, positive_float, positive_int


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dagger",
        help="improve a trained run with DAgger rounds",
        description=(
            "Each round drives --episodes CarRacing episodes with the run's policy (executing the expert's "
            "action with probability beta**round instead), has the expert label every visited frame, adds the "
            "frames to <RUN>/dagger and continues training the run on all its data for --epochs more epochs "
            "(or --minutes). Pure behaviour cloning drifts off the track in closed loop; this is the fix. "
            "Interrupted rounds resume when the same command is run again."
        ),
    )
    p.add_argument("--run", required=True, metavar="RUN", help="a run folder from 'nacdrive train'")
    p.add_argument("--expert", default="track", choices=EXPERTS, help="who labels the frames (default track)")
    p.add_argument("--rounds", type=positive_int, default=DaggerConfig.rounds, help=f"total DAgger rounds for the run (default {DaggerConfig.rounds}, the recipe's)")
    p.add_argument("--until", type=non_negative_float, default=DaggerConfig.until, metavar="RETURN",
                   help="after --rounds, one more round while the last round's clean rollouts average a return below RETURN, or its trained "
                        "weights, driving --check episodes alone, do or lose a track (reach fewer than "
                        f"{LOST_TILES * 100:.0f} %% of its tiles in an episode), up to --max-rounds in all: the extra rounds go only to a run that needs them "
                        "(default 0: exactly --rounds)")
    p.add_argument("--check", type=non_negative_int, default=DaggerConfig.check, metavar="N",
                   help=f"with --until, the episodes each round's trained weights drive alone for it (seeds {CHECK_SEED}.., the same every round; "
                        f"default {DaggerConfig.check}); 0: judge the round's own clean rollouts alone (not those under --perturb), driven "
                        "by the weights before its training with the expert's help: the rule of the earlier studies")
    p.add_argument("--max-rounds", type=positive_int, default=DaggerConfig.max_rounds or None, metavar="N",
                   help="with --until, the most rounds in all (more than --rounds)")
    p.add_argument("--episodes", type=positive_int, default=10, help="rollouts per round (default 10)")
    p.add_argument("--beta", type=float, default=DaggerConfig.beta,
                   help=f"expert-action probability base: beta**round (default: the recipe's for the run's head, {recipe_beta('nac', True):g} for "
                   f"NAC and discrete runs, {recipe_beta('lstm', True):g} for the other heads, whose attention heads crashed at 0.5; "
                   "0: the policy drives alone)")
    p.add_argument("--epochs", type=positive_int, default=2, help="training epochs per round (default 2)")
    p.add_argument("--average", type=positive_int, default=DaggerConfig.average, metavar="K",
                   help="the weights the run leaves (which an evaluation drives) are the mean of its last K rounds' own best "
                        "weights, from round 2 on (stochastic weight averaging); the rounds' rollouts and checks are driven by each "
                        f"round's own, kept in RUN/rounds/ (default {DaggerConfig.average}: the last round's own)")
    p.add_argument("--minutes", type=positive_float, help="also stop a round's training after this many minutes")
    p.add_argument("--workers", type=non_negative_int, default=0, help="rollout processes (default: up to 2)")
    add_ray_flag(p, "the rollouts")
    p.add_argument("--max-steps", type=positive_int, default=1000, help="steps per rollout (default 1000, CarRacing's limit)")
    p.add_argument("--off-road-steps", type=non_negative_int, default=DaggerConfig.off_road_steps, metavar="N",
                   help="end a rollout once all four wheels have been off the road N steps in a row: the expert's labels for the "
                        f"way back are kept, the frames of a car lost on the grass are not (default {DaggerConfig.off_road_steps}: never)")
    p.add_argument("--takeover", type=non_negative_float, default=DaggerConfig.takeover, metavar="U",
                   help="the expert also drives while the car is more than U u/s over the track expert's target speed, has a "
                        "wheel off the road or has stalled (and 10 steps after); with --beta 0 the policy drives until it errs and the rollouts "
                        f"record the expert's way out (SafeDAgger-style; default {DaggerConfig.takeover:g}: no takeover)")
    p.add_argument("--perturb", default=DaggerConfig.perturb, metavar="KIND=LEVEL",
                   help="the policy drives the rollouts on odd seeds (half of each round's) under this perturbation, as 'evaluate --perturb' "
                        "takes it (e.g. jitter=3: frames arrive 1..3 steps apart); the expert labels every frame as in any rollout, so the "
                        "data shows the way back from where late or missing frames lead the policy. 'none': never; 'auto' (default): the "
                        "run's own frame gaps, jitter=J for a run trained on gaps of 1..J (NAC and CfC on the gap mix), none for regular windows")
    p.add_argument("--quiet", action="store_true", help="no training progress bars")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from agents.training.dagger import dagger, rollout_returns

    cfg = DaggerConfig(
        run=args.run, expert=args.expert, rounds=args.rounds, until=args.until, check=args.check, max_rounds=args.max_rounds or 0, episodes=args.episodes, beta=args.beta,
        epochs=args.epochs, average=args.average, minutes=args.minutes, workers=args.workers, ray=args.ray, max_steps=args.max_steps,
        off_road_steps=args.off_road_steps, takeover=args.takeover, perturb=args.perturb,
    )
    state = dagger(cfg, quiet=args.quiet)
    for r in state["rounds"]:
        best = r.get("best") or {}
        print(
            f"round {r['round']}{' (extra)' if r.get('extra') else ''}: beta {r['beta']:.2f}, rollouts mean return {rollout_returns(r)}, "
            f"expert's action on {r.get('expert_share', float('nan')):.0%} of steps, "
            f"validation loss {best.get('val_loss', float('nan')):.4f}, accuracy {best.get('val_accuracy', float('nan')):.1%}"
            + (f"; its weights alone on the check seeds: {r['check']['mean_return']:.1f} ({check_worst(r['check'])})" if "check" in r else "")
        )
    if "average" in state:
        print(f"its weights: the mean of rounds {state['average'][0]}..{state['average'][-1]}'s own (each round's in {args.run}/rounds)")
    print(f"run in {args.run}; evaluate it with 'nacdrive evaluate {args.run}'")
    return 0
