"""The NAC speed / memory benchmark (paper, Appendix D.4), run in one process.

T = 1024 steps, 64 features, 4 heads, batch 1, ten forward passes: mean forward time and peak
tensor memory for NAC (Top-K 2, 8, 32; sqrt; pairwise), torch MHA, LSTM, GRU, CfC, LTC and
the authors' port `torch-nac` when installed; NAC-8k and sqrt at T = 256 ... 8192; and the
recall of sqrt selection against exact Top-K on structured and random keys.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import torch
from torch.profiler import ProfilerActivity, profile

from nac.heads import build_head
from nac.layer import NAC
from nac.selection import KeyRule, topk_exact, topk_sqrt


@dataclass
class BenchConfig:
    seq_len: int = 1024  # T of the main table
    features: int = 64  # input features = d_model
    heads: int = 4  # attention heads
    batch: int = 1
    passes: int = 10  # timed forward passes per model (after one warm-up)
    scaling: tuple[int, ...] = (256, 512, 1024, 2048, 4096, 8192)  # T of the growth table
    threads: int = 0  # torch threads; 0 keeps torch's default
    skip_pairwise: bool = False  # NAC-PW needs O(T^2) memory and seconds per pass

    def __post_init__(self) -> None:
        for name in ("seq_len", "features", "heads", "batch", "passes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 (got {getattr(self, name)})")
        if self.features % self.heads:
            raise ValueError(f"features ({self.features}) must be divisible by heads ({self.heads})")


def peak_memory_bytes(fn: Callable[[], Any]) -> int:
    """Peak bytes of CPU tensors allocated while fn runs (on top of what existed before).

    torch keeps no CPU allocator statistics (torch.cuda.max_memory_allocated is GPU only), so
    this replays the profiler's allocation events in time order and takes the running maximum.
    """
    with _silent_stderr(), profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted(
        (e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"
    )
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return peak


@contextlib.contextmanager
def _silent_stderr() -> Iterator[None]:
    """Silence file descriptor 2: the profiler's C++ side prints two lines per run there
    (kineto's "USDT ... profiler_start/stop"), and no setting of it turns them off."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _tensor_bytes(tensors: Iterator[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def measure(model: torch.nn.Module, x: torch.Tensor, passes: int) -> dict[str, float]:
    """Mean / std forward time (s) and peak memory (MB: weights + input + activations)."""
    model.eval()
    with torch.inference_mode():
        model(x)  # warm-up
        times = []
        for _ in range(passes):
            t0 = time.perf_counter()
            model(x)
            times.append(time.perf_counter() - t0)
        extra = peak_memory_bytes(lambda: model(x))
    resident = _tensor_bytes(model.parameters()) + _tensor_bytes(model.buffers()) + _tensor_bytes(iter([x]))
    return {
        "mean_s": statistics.fmean(times),
        "std_s": statistics.pstdev(times),
        "steps_per_s": x.shape[0] * x.shape[1] / statistics.fmean(times),
        "peak_mb": (resident + extra) / 2**20,
    }


def _nac(cfg: BenchConfig, **options: Any) -> NAC:
    return NAC(cfg.features, cfg.heads, input_dim=cfg.features, return_sequences=True, **options)


def _models(cfg: BenchConfig) -> list[tuple[str, Callable[[], torch.nn.Module]]]:
    def head(name: str) -> Callable[[], torch.nn.Module]:
        return lambda: build_head(name, input_dim=cfg.features, d_model=cfg.features, num_heads=cfg.heads, return_sequences=True)

    models: list[tuple[str, Callable[[], torch.nn.Module]]] = [
        ("NAC-Exact/2k", lambda: _nac(cfg, topk=2)),
        ("NAC-Exact/8k", lambda: _nac(cfg, topk=8)),
        ("NAC-Exact/32k", lambda: _nac(cfg, topk=32)),
        ("NAC-sqrt/8k", lambda: _nac(cfg, topk=8, selection="sqrt")),
        ("NAC-Euler/8k", lambda: _nac(cfg, topk=8, mode="euler")),
        ("NAC-Steady/8k", lambda: _nac(cfg, topk=8, mode="steady")),
    ]
    if not cfg.skip_pairwise:
        models.append(("NAC-PW", lambda: _nac(cfg, selection="pairwise")))
    models += [(label, head(name)) for label, name in (("MHA (torch)", "mha"), ("MHA-RoPE", "mha-rope"), ("LSTM", "lstm"), ("GRU", "gru"), ("CfC", "cfc"), ("LTC", "ltc"))]
    torch_nac = _torch_nac_factory(cfg)
    if torch_nac is not None:
        models.append(("torch-nac 0.0.2 (authors' port)", torch_nac))
    return models


def _torch_nac_factory(cfg: BenchConfig) -> Callable[[], torch.nn.Module] | None:
    """The authors' PyTorch port, when the optional extra is installed."""
    try:
        from torch_nac import NAC as AuthorsNAC  # type: ignore[import-not-found]
    except ImportError:
        return None

    return lambda: AuthorsNAC(
        d_model=cfg.features, num_heads=cfg.heads, topk=8, mode="exact", return_sequences=True, input_dim=cfg.features
    )


def sqrt_recall(seq_len: int, dim: int = 16, topk: int = 8, seed: int = 0) -> dict[str, float]:
    """Share of exact Top-K keys that sqrt selection finds, on clustered and on random keys."""
    g = torch.Generator().manual_seed(seed)
    n_clusters = max(2, int(seq_len**0.5))
    centres = torch.randn(n_clusters, dim, generator=g) * 4
    per = -(-seq_len // n_clusters)
    structured = centres.repeat_interleave(per, 0)[:seq_len] + torch.randn(seq_len, dim, generator=g) * 0.3
    queries_s = centres[torch.randint(0, n_clusters, (seq_len,), generator=g)] + torch.randn(seq_len, dim, generator=g) * 0.3
    out = {}
    for label, keys, queries in (
        ("structured", structured, queries_s),
        ("random", torch.randn(seq_len, dim, generator=g), torch.randn(seq_len, dim, generator=g)),
    ):
        q, k = queries[None, None], keys[None, None]
        rule = KeyRule(torch.arange(seq_len), torch.arange(seq_len))
        exact, _ = topk_exact(q, k, rule, topk)
        approx, _ = topk_sqrt(q, k, rule, topk)
        out[label] = (approx.unsqueeze(-1) == exact.unsqueeze(-2)).any(-1).float().mean().item()
    return out


def run(cfg: BenchConfig, progress: Callable[[str], None] = lambda _: None) -> dict[str, Any]:
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    torch.manual_seed(0)
    x = torch.randn(cfg.batch, cfg.seq_len, cfg.features)
    rows = []
    for label, factory in _models(cfg):
        progress(f"{label} at T={cfg.seq_len}")
        try:
            rows.append({"model": label, **measure(factory(), x, cfg.passes)})
        except Exception as exc:  # a baseline that fails is reported, not hidden
            rows.append({"model": label, "error": f"{type(exc).__name__}: {exc}"})
    scaling = []
    for t in cfg.scaling:
        xt = torch.randn(cfg.batch, t, cfg.features)
        for label, options in (("NAC-Exact/8k", {"topk": 8}), ("NAC-sqrt/8k", {"topk": 8, "selection": "sqrt"})):
            progress(f"{label} at T={t}")
            scaling.append({"model": label, "seq_len": t, **measure(_nac(cfg, **options), xt, max(1, min(cfg.passes, 3)))})
    recall = [{"seq_len": t, **sqrt_recall(t)} for t in (256, 1024, 4096) if t <= max(cfg.scaling + (cfg.seq_len,))]
    return {
        "config": {**cfg.__dict__, "scaling": list(cfg.scaling)},
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "table": rows,
        "scaling": scaling,
        "sqrt_recall": recall,
    }


def to_markdown(result: dict[str, Any]) -> str:
    c = result["config"]
    lines = [
        f"NAC benchmark: T={c['seq_len']}, {c['features']} features, {c['heads']} heads, batch {c['batch']}, "
        f"{c['passes']} forward passes, torch {result['torch']} on {result['threads']} CPU threads",
        "",
        "| model | forward mean (s) | std (s) | steps/s | peak memory (MB) |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in result["table"]:
        if "error" in r:
            lines.append(f"| {r['model']} | failed: {r['error']} | | | |")
        else:
            lines.append(f"| {r['model']} | {r['mean_s']:.4f} | {r['std_s']:.4f} | {r['steps_per_s']:.0f} | {r['peak_mb']:.1f} |")
    lines += ["", "Growth with T:", "", "| model | T | forward mean (s) | peak memory (MB) |", "|---|---:|---:|---:|"]
    for r in result["scaling"]:
        lines.append(f"| {r['model']} | {r['seq_len']} | {r['mean_s']:.4f} | {r['peak_mb']:.1f} |")
    lines += ["", "sqrt selection: recall of exact Top-8 keys", "", "| T | structured keys | random keys |", "|---:|---:|---:|"]
    for r in result["sqrt_recall"]:
        lines.append(f"| {r['seq_len']} | {r['structured']:.3f} | {r['random']:.3f} |")
    return "\n".join(lines)
