"""`nacdrive bench nac`: NAC's speed and memory against its baselines (paper, Appendix D.4)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from scripts.cli import non_negative_int, positive_int


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="benchmark NAC's forward time and memory against its baselines",
        description=(
            "The paper's Appendix D.4 setting: T=1024 steps, 64 features, 4 heads, batch 1, ten "
            "forward passes; mean time and peak tensor memory for NAC (Top-K 2/8/32, sqrt, "
            "pairwise), torch MHA, LSTM, GRU, CfC, LTC (and torch-nac when installed), all in "
            "one process; then NAC-8k and sqrt at T=256..8192, and sqrt's recall of exact Top-K."
        ),
    )
    p.add_argument("target", choices=["nac"], help="what to benchmark")
    p.add_argument("--json", type=Path, metavar="FILE", help="also write the results as JSON")
    p.add_argument("--seq-len", type=positive_int, default=1024, help="T of the main table (default 1024)")
    p.add_argument("--passes", type=positive_int, default=10, help="timed forward passes (default 10)")
    p.add_argument("--max-len", type=positive_int, default=8192, help="longest T of the growth table (default 8192)")
    p.add_argument("--threads", type=non_negative_int, default=0, help="torch CPU threads (default: torch's choice)")
    p.add_argument("--skip-pairwise", action="store_true", help="leave out NAC-PW (O(T^2) memory)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from nac.bench import BenchConfig, run as run_bench, to_markdown

    scaling = tuple(t for t in (256, 512, 1024, 2048, 4096, 8192, 16384) if t <= args.max_len)
    cfg = BenchConfig(
        seq_len=args.seq_len, passes=args.passes, scaling=scaling, threads=args.threads, skip_pairwise=args.skip_pairwise
    )
    result = run_bench(cfg, progress=lambda msg: print(f"  measuring {msg}", file=sys.stderr, flush=True))
    print(to_markdown(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"\nwrote {args.json}")
    return 0
