"""`nacdrive bench nac|policy|bridge|env|train|ppo`: NAC's speed and memory against its baselines (paper, Appendix D.4),
and the timings of the policy, the bridge, the simulator and a training step.

Its options are written here rather than generated from a config (scripts.options): each target is a function of a
few keyword arguments, and the targets share the flags (--json, --threads, --steps, --runs, --heads)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from scripts.args import non_negative_int, positive_int


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="benchmark NAC's forward time and memory against its baselines",
        description=(
            "The paper's Appendix D.4 setting: T=1024 steps, 64 features, 4 heads, batch 1, ten "
            "forward passes; mean time and peak tensor memory for NAC (Top-K 2/8/32, sqrt, "
            "pairwise), torch MHA, LSTM, GRU, CfC, LTC (and torch-nac when installed), all in "
            "one process; then NAC-8k and sqrt at T=256..8192, and sqrt's recall of exact Top-K. "
            "'bench policy' times DrivingPolicy.select_action per step (one CNN pass + the head's streaming "
            "step) over 1000 real CarRacing frames on one CPU thread: p50/p90/p99/max per policy. "
            "'bench env' times env.step of gymnasium's CarRacing-v3 against nac-drive's FastCarRacing (renderer "
            "gymnasium: the same pixels; renderer direct: the default), the observation alone, a planned step of the "
            "discrete track expert and whole episodes (the expert's, a policy's: --runs RUN, default the shipped NAC), "
            "each as a ratio to gymnasium's step measured in the same run. 'bench train' measures training "
            "throughput as 'nacdrive train' steps, for the CarRacing network and PilotNet (--data, --recording: "
            "default, a few episodes recorded now), on the CPU and the GPU where there is one: samples a second, "
            "the step's p50 / p99 and the share of it spent waiting for data, with batches made ahead "
            "(--prefetch) and when asked, and on the CPU with torch's dropout, every row beside its twins. 'bench ppo' "
            "measures what bounds the PPO expert's training: gymnasium's step, PPO's training environment, and one PPO "
            "iteration with the zoo's settings for each count of environments (--envs), its rollout and its update timed "
            "apart, each as a ratio to gymnasium's step in the same run."
        ),
    )
    p.add_argument("target", choices=["nac", "policy", "bridge", "env", "train", "ppo"], help="nac: the layer (Appendix D.4); policy: closed-loop step latency; bridge: Udacity bridge round trips; env: the simulator's step; train: a training step; ppo: PPO's training steps")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the results as JSON")
    p.add_argument("--seq-len", type=positive_int, default=1024, help="T of the main table (default 1024)")
    p.add_argument("--passes", type=positive_int, default=10, help="timed forward passes (default 10)")
    p.add_argument("--max-len", type=positive_int, default=8192, help="longest T of the growth table (default 8192)")
    p.add_argument("--threads", type=non_negative_int, default=0, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--skip-pairwise", action="store_true", help="leave out NAC-PW (O(T^2) memory)")
    p.add_argument("--runs", nargs="+", default=[], metavar="RUN", help="policy: run folders to time; env: the policy whose episodes are timed (default the shipped NAC)")
    p.add_argument("--heads", nargs="*", default=None, metavar="HEAD", help="policy: untrained networks to time (default nac lstm gru cfc mha without --runs); train: the head (default nac)")
    p.add_argument("--steps", type=positive_int, default=None, help="policy, env: steps timed (default 1000); train: steps per row (default 60)")
    p.add_argument("--data", metavar="DIR", help="train: CarRacing demonstrations to take batches from (default: 4 episodes recorded now)")
    p.add_argument("--recording", metavar="DIR", help="train: a Udacity recording (default: 2 stand-in episodes recorded now)")
    p.add_argument("--prefetch", type=non_negative_int, default=None, help="train: batches made ahead (default: train's)")
    p.add_argument("--run", metavar="RUN", help="bridge: a --task udacity run to serve")
    p.add_argument("--seconds", type=positive_int, default=60, help="bridge: how long to drive (default 60)")
    p.add_argument("--envs", type=positive_int, nargs="+", default=[1, 2, 8], metavar="N", help="ppo: counts of environments to time (default 1 2 8; the zoo trains on 8)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.target == "policy":
        return run_policy(args)
    if args.target == "bridge":
        return run_bridge(args)
    if args.target == "env":
        return run_env(args)
    if args.target == "train":
        return run_train(args)
    if args.target == "ppo":
        return run_ppo(args)
    from nac.bench import BenchConfig, run as run_bench, to_markdown

    scaling = tuple(t for t in (256, 512, 1024, 2048, 4096, 8192, 16384) if t <= args.max_len)
    cfg = BenchConfig(
        seq_len=args.seq_len, passes=args.passes, scaling=scaling, threads=args.threads, skip_pairwise=args.skip_pairwise
    )
    result = run_bench(cfg, progress=lambda msg: print(f"  measuring {msg}", file=sys.stderr, flush=True))
    print(to_markdown(result))
    _write_json(args.json, result)
    return 0


def run_policy(args: argparse.Namespace) -> int:
    from agents.evaluation.latency import bench_policies

    heads = args.heads if args.heads is not None else ([] if args.runs else ["nac", "lstm", "gru", "cfc", "mha"])
    rows = bench_policies(args.runs, heads, steps=args.steps or 1000, threads=args.threads or 1)
    print("| policy | head | p50 ms | p90 ms | p99 ms | max ms |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['policy']} | {r['head']} | {r['p50_ms']:.2f} | {r['p90_ms']:.2f} | {r['p99_ms']:.2f} | {r['max_ms']:.2f} |")
    _write_json(args.json, rows)
    return 0


def run_env(args: argparse.Namespace) -> int:
    from agents.evaluation.latency import bench_env

    rows = bench_env(args.steps or 1000, policy=args.runs[0] if args.runs else None)
    print("| what | name | p50 ms | p99 ms | x gymnasium's step |\n|---|---|---|---|---|")
    for r in rows:
        if r["what"] == "episode":
            print(f"| episode | {r['name']} | {r['episodes_per_minute']:.1f} episodes a minute ({r['steps']} steps in "
                  f"{r['seconds']:.1f} s) | | {r['x_gymnasium']:.2f} |")
        else:
            print(f"| {r['what']} | {r['name']} | {r['p50_ms']:.3f} | {r['p99_ms']:.3f} | {r['x_gymnasium']:.2f} |")
    exact, direct = rows[1], rows[2]
    print(f"\nrenderer gymnasium: observations differing from gymnasium's: {exact['frames_differing']} of {exact['steps']}; "
          f"renderer direct: mean absolute difference per channel {direct['mean_abs_diff']}")
    print("x gymnasium's step: gymnasium CarRacing-v3's median step time over the row's (for an episode: over its "
          "time per step), measured in this run")
    _write_json(args.json, rows)
    return 0


def run_train(args: argparse.Namespace) -> int:
    import tempfile

    from agents.training.collect import CollectConfig, collect
    from agents.training.throughput import bench_train, devices, markdown, twins
    from sim_bridge.carracing_sim import record_training
    from sim_bridge.config import SimConfig

    with tempfile.TemporaryDirectory() as tmp:
        data = {"carracing": args.data, "udacity": args.recording}
        if data["carracing"] is None:  # the track expert's frames, recorded now: the batches are real ones
            print("  recording CarRacing demonstrations (4 episodes of 200 steps)", file=sys.stderr, flush=True)
            data["carracing"] = str(Path(tmp) / "demos")
            collect(CollectConfig(out=data["carracing"], episodes=4, max_steps=200, workers=1, continuous=True))
        if data["udacity"] is None:  # the stand-in simulator's camera images, in the real simulator's format
            print("  recording a stand-in Udacity session (2 episodes of 150 frames)", file=sys.stderr, flush=True)
            data["udacity"] = str(Path(tmp) / "udacity")
            record_training(SimConfig(record=data["udacity"], episodes=2, max_steps=150))
        head = (args.heads or ["nac"])[0]
        rows = bench_train(data, head, steps=args.steps or 60, prefetch=args.prefetch)
        twin = twins(data["carracing"], head) if "cuda" in devices() else None
    print(markdown(rows))
    if twin is not None:
        print(f"\nthe same run on cpu and cuda, {twin['steps']} float32 steps from the same weights and batches: largest relative "
              f"difference of a parameter {twin['param_rel_diff']:.2e}, of a step's loss {twin['loss_rel_diff']:.2e}")
        rows.append({"twins": twin})
    print(f"\nhead {head}; a step: the batch (waited for, if not made ahead), forward, backward, Adam, synchronised on a "
          "GPU; x when asked: samples a second over the same device's row whose batches are made when the step asks; x cpu: "
          "over the CPU's row of the same kind, in this run")
    _write_json(args.json, rows)
    return 0


def run_ppo(args: argparse.Namespace) -> int:
    from agents.experts.ppo import bench_ppo

    rows = bench_ppo(tuple(args.envs), gym_steps=args.steps or 300)
    print("| what | name | steps a second | x gymnasium's step | rollout s | update s |\n|---|---|---|---|---|---|")
    for r in rows:
        extra = f" {r['rollout_s']:.1f} ({r['rollout_steps_per_s']:.0f}/s) | {r['update_s']:.1f} ({r['update_steps_per_s']:.0f}/s) |" if "rollout_s" in r else " | |"
        print(f"| {r['what']} | {r['name']} | {r['steps_per_s']:.1f} | {r['x_gymnasium']:.3f} |{extra}")
    print("\nx gymnasium's step: steps a second over gymnasium CarRacing-v3's in one process, measured in this run (a PPO step is "
          "two of the environment's, frame skip 2); a PPO iteration: n_steps 512 per environment, then 10 epochs of batches of 128")
    _write_json(args.json, rows)
    return 0


def run_bridge(args: argparse.Namespace) -> int:
    from scripts.args import UserError
    from sim_bridge.round_trips import bench_bridge

    if not args.run:
        raise UserError("bench bridge needs --run RUN (a 'nacdrive train --task udacity' run)")
    r = bench_bridge(args.run, float(args.seconds))
    print(
        f"{r['exchanges']} telemetry -> steer round trips in {r['seconds']:.0f} s ({r['fps']:.0f} per s): "
        f"p50 {r['p50_ms']:.2f} ms, p99 {r['p99_ms']:.2f} ms, max {r['max_ms']:.1f} ms"
    )
    rss = r["rss_mb"]
    shown = [rss[i] for i in sorted({round(k * (len(rss) - 1) / 8) for k in range(9)})]  # 9 points over the drive
    print("bridge resident memory (s, MB): " + ", ".join(f"({t}, {m})" for t, m in shown))
    _write_json(args.json, r)
    return 0


def _write_json(path: Path | None, data: object) -> None:
    if path:
        from nac.checkpoint import write_json

        write_json(path, data)
        print(f"\nwrote {path}")
