"""`nacdrive train`: behaviour cloning of a CNN + sequence-head policy on demonstrations."""

from __future__ import annotations

import argparse
from typing import Any

from nac.driving import WHEEL_SPEEDS
from nac.heads import head_names
from nac.pilotnet import DENSE
from scripts.args import add_gap_flags, key_value, non_negative_float, non_negative_int, positive_float, positive_int


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="behaviour-clone a driving policy from demonstrations",
        description=(
            "--task carracing (default) trains the CarRacing driving network (per-frame CNN, a sequence head over the last W frames, "
            "dense 64, action output) on windows of demonstration frames labelled with the expert's action at "
            "the last frame. Episodes are split into training and validation (never a frame of one episode on "
            "both sides). The run folder gets config.json, best/last weights (safetensors), metrics.json and "
            "TensorBoard events (tb/); Ctrl-C leaves a run that --resume continues. --task udacity trains PilotNet "
            "with the head in place of its dense layers on driving_log.csv recordings (MSE on steering; split by "
            "recording session; side cameras, flips, shifts, shadows and brightness as augmentation). Multi-GPU: "
            "torchrun --nproc_per_node N -m scripts.cli train ..."
        ),
    )
    p.add_argument("--task", default="carracing", choices=("carracing", "udacity"),
                   help="carracing: frame windows -> actions (default); udacity: PilotNet steering from driving_log.csv recordings")
    p.add_argument("--data", nargs="+", required=True, metavar="DIR",
                   help="demonstration folder(s) from 'nacdrive collect', or Udacity recording folder(s) with driving_log.csv")
    p.add_argument("--out", required=True, metavar="RUN", help="run folder to create (or continue with --resume)")
    p.add_argument("--head", default="nac", choices=[*head_names(), DENSE],
                   help=f"sequence head (default nac); {DENSE}: PilotNet's own dense layers (--task udacity only)")
    p.add_argument("--window", type=positive_int, default=8, help="frames per window (default 8)")
    p.add_argument("--stride", type=positive_int, default=1, help="steps between a window's frames (default 1)")
    add_gap_flags(p)
    p.add_argument("--arrival-windows", action="store_true",
                   help="with DAgger rollouts driven under a perturbation (dagger --perturb): train each step the policy decided on "
                   "on the window it saw there, the frames with the gaps they really came at, instead of gaps drawn afresh (needs --stride 1)")
    p.add_argument("--augment", default="none", choices=("none", "jitter", "randconv", "overlay"),
                   help="an augmentation against visual shift, drawn per chunk of steps on half of them, on the scene above the "
                   "instrument strip: jitter (brightness, contrast, saturation, hue), randconv (a random 3x3 convolution, Lee et al. "
                   "2020), overlay (blended with a random 1/f picture, as SODA / SVEA overlay images); default none")
    p.add_argument("--shift", type=int, default=0, metavar="S",
                   help="augment frames by random shifts of up to S pixels (edges repeated; the same shift for a chunk of "
                   "consecutive steps, so a window's frames move together; DrQ / RAD use 4 on 84-pixel frames; default 0). "
                   "Measured on CarRacing: shift 4 cut the quick-start recipe from 829 to 442 (3 runs each; docs/results.md)")
    p.add_argument("--select-episodes", type=int, default=0, metavar="N",
                   help="keep as best the weights that drive best over N closed-loop episodes (seeds 20000.., the same at "
                   "every validation; they are then not held-out seeds) instead of those with the lowest validation loss (default 0)")
    p.add_argument("--epochs", type=positive_int, help="passes over the training windows (default: carracing 4, the recipe's behaviour cloning before 'nacdrive dagger' "
                   "adds its rounds; udacity 10; no limit with --minutes)")
    p.add_argument("--minutes", type=positive_float, help="stop after this many minutes of training")
    p.add_argument("--batch-size", type=positive_int, default=32, help="windows per step (default 32)")
    p.add_argument("--lr", type=positive_float, default=1e-4, help="Adam learning rate (default 1e-4)")
    p.add_argument("--ema", type=float, default=0.0, metavar="DECAY",
                   help="validate and save an exponential moving average of the weights with this decay per step, e.g. 0.999 "
                        "(a half-life of about 700 steps); 0 (default) keeps the raw weights")
    p.add_argument("--chunk", type=positive_int, default=8, help="consecutive steps per group in a batch, sharing frames (default 8)")
    p.add_argument(
        "--balance", default="auto", choices=("auto", "weights", "sampler", "none"),
        help="class imbalance: weighted loss, balanced sampling, or none; auto (default): weights for discrete "
        "actions, none for continuous ones, --rate-window and --wheel-target (reweighting biases the mean action / the rates); "
        "with --wheel-target, weights and sampler weight the speed excess's error by whether the expert brakes",
    )
    p.add_argument("--loss", default="mse", choices=("mse", "l1"), help="continuous actions: squared error (conditional mean, default) "
                   "or absolute error (conditional median: no constant small brake where the expert brakes in rare pulses)")
    p.add_argument("--val-fraction", type=positive_float, default=0.2, help="share of episodes held out (default 0.2)")
    p.add_argument("--folds", type=positive_int, default=1, help="k-fold cross-validation by episode (default 1: one split)")
    p.add_argument("--device", default="auto", help="auto (cuda when present), cpu, cuda, cuda:N")
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed of the split, the weights and the batch order")
    p.add_argument("--d-model", type=positive_int, help="head width (default 64; udacity 100)")
    p.add_argument("--num-heads", type=positive_int, help="attention heads for nac / mha / mha-rope (default 16; udacity 20)")
    p.add_argument("--nac", type=key_value, action="append", default=[], metavar="KEY=VALUE", help="NAC option, e.g. topk=8 mode=euler")
    p.add_argument("--no-time", action="store_true", help="do not give heads the frames' timestamps")
    p.add_argument("--brake-gate", action="store_true", help="continuous actions: a fourth output decides whether to brake at all "
                   "(cross-entropy), the brake output how hard (fitted where the expert brakes)")
    p.add_argument("--rate-window", type=non_negative_int, default=0, metavar="K",
                   help="discrete actions: learn each action's rate over the steps t-K..t+K of the demonstrations (the share "
                   "of steering in a bend, which the frames show) instead of the action at t (the phase of the expert's "
                   "steering pulses, which they do not); the policy then drives by error diffusion (default 0: the action)")
    p.add_argument("--wheel-target", action="store_true",
                   help="discrete actions: learn the front-wheel angle the expert plans 3 steps ahead and the car's speed above "
                   "the expert's target speed, instead of its steering pulses; the policy then brakes when that excess is "
                   "above the expert's margin (3 u/s), else takes the action that brings its wheels nearest that angle. "
                   "Needs demonstrations of the discrete track expert recorded with both")
    p.add_argument("--turn-weight", type=non_negative_float, default=0.0, metavar="W",
                   help="with --wheel-target, weight the wheel angle's squared error by 1 + W x how fast the expert's planned "
                   "angle turns there (over +-10 steps, in units of the wheel's top rate: 0 on straights and steady bends, "
                   "about 0.35 where a bend turns straight into the other way; default 0, unweighted). Measured with W 10 on two "
                   "discrete runs that had lost laps: 862.7 and 861.8 against 866.9 and 873.4, the same tracks lost (docs/results.md)")
    p.add_argument("--wheel-speed", choices=WHEEL_SPEEDS,
                   help="with --wheel-target, what the network learns of the speed: 'target' (default), the expert's target "
                   "speed, which the policy compares with the speed the frame's speed bar shows; 'excess', the car's speed "
                   "above that target, which the network then reads off the frames itself")
    p.add_argument("--speed-output", action="store_true", help="udacity: also predict each frame's recorded speed, which "
                   "'drive' then uses as its target speed (the driver's slowing before bends, learned)")
    p.add_argument("--init-from", metavar="RUN", help="start from this run's best weights (same network)")
    p.add_argument("--resume", action="store_true", help="continue the interrupted (or finished, with a larger budget) run in --out")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from scripts.args import UserError
    from agents.training.tasks import train
    from agents.training.loop import TrainConfig

    net: dict[str, Any] = {k: v for k, v in (("d_model", args.d_model), ("num_heads", args.num_heads)) if v is not None}
    if args.task == "carracing":
        net["use_time"] = not args.no_time
        if args.brake_gate:
            net["brake_gate"] = True
        if args.rate_window:
            net["rate_window"] = args.rate_window
        if args.wheel_target:
            net["wheel_target"] = True
            net["wheel_speed"] = args.wheel_speed or "target"
    if args.wheel_speed and not args.wheel_target:
        raise UserError("--wheel-speed says what a wheel-angle network learns of the speed: give it with --wheel-target")
    for flag, given in (("--rate-window", args.rate_window), ("--wheel-target", args.wheel_target)):
        if given and args.task != "carracing":
            raise UserError(f"{flag} is for --task carracing with discrete actions (Udacity steering is continuous)")
    if args.speed_output:
        if args.task != "udacity":
            raise UserError("--speed-output is for --task udacity (the CarRacing network predicts gas and brake itself)")
        net["speed_output"] = True
    if args.nac:
        net["nac"] = dict(args.nac)
    cfg = TrainConfig(
        data=args.data, out=args.out, task=args.task, head=args.head, window=args.window, frame_stride=args.stride, stride_jitter=args.stride_jitter, regular_share=args.regular_share, arrival_windows=args.arrival_windows, shift=args.shift, augment=args.augment, select_episodes=args.select_episodes,
        epochs=args.epochs, minutes=args.minutes, batch_size=args.batch_size, lr=args.lr, ema=args.ema, chunk=args.chunk,
        balance=args.balance, loss=args.loss, turn_weight=args.turn_weight, val_fraction=args.val_fraction, folds=args.folds, device=args.device,
        seed=args.seed, net=net, init_from=args.init_from,
    )
    m = train(cfg, resume=args.resume, quiet=args.quiet)
    if not m:  # a torchrun worker other than rank 0: rank 0 reports
        return 0
    if "folds" in m:
        print(
            f"{m['folds']}-fold validation accuracy {m['val_accuracy_mean']:.1%} +- {m['val_accuracy_std']:.1%}, "
            f"loss {m['val_loss_mean']:.4f} +- {m['val_loss_std']:.4f}; folds in {args.out}/fold*/"
        )
        return 0
    best = m.get("best") or {}
    print(
        f"{m['head']}: {m['steps']} steps in {m['train_seconds'] / 60:.1f} min; best validation loss "
        f"{best.get('val_loss', float('nan')):.4f}"
        + (f", accuracy {best['val_accuracy']:.1%}" if "val_accuracy" in best else "")
        + (f", steering MAE {best['val_mae']:.3f}" if "val_mae" in best else "")
        + f"; run in {args.out}"
    )
    return 0
