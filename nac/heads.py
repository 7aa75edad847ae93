"""One registry of sequence heads: NAC, its ablations, and the baselines it is compared with.

Every head maps (B, T, input_dim) [+ timestamps (B, T)] to (B, output_dim) for the last step,
or (B, T, output_dim) with return_sequences, and streams one step at a time for closed loop:
`state = head.init_state(B)`, then `y, state = head.step(x_t, state, t_t)` per step.

A baseline is a registry entry and a config, never a copied module.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

import torch
import torch.nn.functional as F
from ncps.torch import CfC, LTC
from torch import Tensor, nn

from nac.layer import NAC, NACConfig
from nac.selection import allowed_keys
from nac.config import ConfigDict, check_ranges, need

HEADS: dict[str, Callable[["HeadConfig"], "SequenceHead"]] = {}
_PRESETS: dict[str, dict[str, Any]] = {}


def register(name: str, **nac_preset: Any) -> Callable[[type["SequenceHead"]], type["SequenceHead"]]:
    """Class decorator: make a head buildable by name (optionally with preset NAC options)."""

    def deco(cls: type[SequenceHead]) -> type[SequenceHead]:
        HEADS[name] = cls
        _PRESETS[name] = nac_preset
        return cls

    return deco


def head_names() -> list[str]:
    return list(HEADS)


@dataclass
class HeadConfig(ConfigDict):
    """A sequence head by registry name, with the options every head understands."""

    WHAT: ClassVar[str] = "head options"

    name: str  # registry name: see head_names()
    input_dim: int  # features per step
    output_dim: int | None = None  # None: d_model
    d_model: int = 64  # hidden width (NAC / attention d_model, RNN hidden units)
    num_heads: int = 4  # attention heads (nac, mha)
    return_sequences: bool = False  # output every step (B, T, out) or the last (B, out)
    causal: bool = False  # attention heads: a step sees only itself and the past (recurrent heads always do)
    window: int | None = None  # a step sees only the last `window` steps (attention heads: needs causal)
    nac: dict[str, Any] = field(default_factory=dict)  # NAC options (see NACConfig), nac* only

    def __post_init__(self) -> None:
        check_ranges(self)
        need(self.name in HEADS, f"unknown head {self.name!r}; choose one of {', '.join(HEADS)}")
        need(self.input_dim >= 1, f"input_dim must be >= 1 (got {self.input_dim})")
        need(self.d_model >= 1, f"d_model must be >= 1 (got {self.d_model})")
        need(self.output_dim is None or self.output_dim >= 1, "output_dim must be >= 1")
        need(self.window is None or self.window >= 1, f"window must be >= 1 (got {self.window})")
        need(
            self.window is None or self.causal or not HEADS[self.name].is_attention,
            "window needs causal=True for attention heads",
        )
        need(not self.nac or self.name.startswith("nac"), f"nac options given for head {self.name!r}")
        if self.name.startswith("nac"):
            self.nac_config()  # validate now, with NAC's own messages

    @property
    def out_dim(self) -> int:
        return self.output_dim or self.d_model

    def nac_config(self) -> NACConfig:
        opts = {**_PRESETS.get(self.name, {}), **self.nac}
        return NACConfig.from_dict(
            {
                **opts,
                "d_model": self.d_model,
                "num_heads": self.num_heads,
                "input_dim": self.input_dim,
                "return_sequences": True,
                "causal": self.causal,
                "window": self.window,
            }
        )



def build_head(config: HeadConfig | dict[str, Any] | str, **kwargs: Any) -> "SequenceHead":
    """build_head("lstm", input_dim=30) or build_head(HeadConfig(...))."""
    if isinstance(config, str):
        config = HeadConfig(name=config, **kwargs)
    elif isinstance(config, dict):
        config = HeadConfig.from_dict({**config, **kwargs})
    return HEADS[config.name](config)


class SequenceHead(nn.Module):
    """Base class: shared output handling and a generic streaming fallback."""

    accepts_time: ClassVar[bool] = False  # forward() uses timestamps
    is_attention: ClassVar[bool] = False  # output is a weighting of the window's steps

    def __init__(self, config: HeadConfig) -> None:
        super().__init__()
        self.config = config

    def _sequence(self, x: Tensor, timestamps: Tensor | None, key_padding_mask: Tensor | None) -> Tensor:
        """Embedded steps (B, T, E) -> (B, T, out_dim) for every step (or (B, 1, out) for the last)."""
        raise NotImplementedError

    def embed_steps(self, x: Tensor) -> Tensor:
        """The head's map of each step alone, (..., input_dim) -> (..., E): the identity, or the input projections of
        heads that begin with them (NAC's sensory gates, attention's q / k / v). Windows that share steps (training on
        overlapping windows of frames) map each step once and hand the windows of mapped steps to over_steps()."""
        return x

    def forward(self, x: Tensor, timestamps: Tensor | None = None, key_padding_mask: Tensor | None = None) -> Tensor:
        if x.dim() != 3:
            raise ValueError(f"a sequence head expects (B, T, D), got {tuple(x.shape)}")
        return self.over_steps(self.embed_steps(x), timestamps, key_padding_mask)

    def over_steps(self, x: Tensor, timestamps: Tensor | None = None, key_padding_mask: Tensor | None = None) -> Tensor:
        """forward() on embedded steps (B, T, E), embed_steps()'s output."""
        if x.dim() != 3:
            raise ValueError(f"a sequence head expects (B, T, E), got {tuple(x.shape)}")
        ts = timestamps if self.accepts_time else None
        w = self.config.window
        if w is not None and x.shape[1] > w:
            if not self.config.return_sequences:  # the last step sees only the last w steps
                x, ts = x[:, -w:], None if ts is None else ts[:, -w:]
                key_padding_mask = None if key_padding_mask is None else key_padding_mask[:, -w:]
            elif not self.is_attention:  # attention heads mask keys; a recurrent state cannot forget
                return self._windowed_sequences(x, ts)
        y = self._sequence(x, ts, key_padding_mask)
        return y if self.config.return_sequences else y[:, -1]

    def _windowed_sequences(self, x: Tensor, ts: Tensor | None) -> Tensor:
        """Every step's output from its own last `window` steps: the first w - 1 steps from the
        sequence's start, each later step from the window ending there (rerun from zero)."""
        b, t, d = x.shape
        w = self.config.window
        assert w is not None
        head = self._sequence(x[:, : w - 1], None if ts is None else ts[:, : w - 1], None)  # (B, w-1, out)
        xs = x.unfold(1, w, 1).permute(0, 1, 3, 2).reshape(-1, w, d)  # (B * (T-w+1), w, D)
        tw = None if ts is None else ts.unfold(1, w, 1).reshape(-1, w)
        tail = self._sequence(xs, tw, None)[:, -1].reshape(b, t - w + 1, -1)
        return torch.cat([head, tail], 1)

    def last_step_attention(self, x: Tensor, timestamps: Tensor | None = None, effective: bool = True) -> Tensor | None:
        """(B, T) how much the last step attends to each step of x (mean over heads), or None
        for heads that do not attend (recurrent heads). effective: the weight the output gives
        each step's value (NAC: softmax x t_ij, which need not sum to 1); else the softmax alone.
        For plain attention the two are the same."""
        return None

    # Generic streaming: keep the inputs of the visible past and rerun forward on them.
    # Attention heads without a cheaper cache and windowed recurrent heads use it; NAC caches
    # its keys and unwindowed recurrent heads carry their state instead.
    def init_state(self, batch_size: int = 1) -> Any:
        return {"x": None, "t": None}

    def step(self, x_t: Tensor, state: Any, timestamp: Tensor | None = None) -> tuple[Tensor, Any]:
        e_t = self.embed_steps(x_t)[:, None]
        xs = e_t if state["x"] is None else torch.cat([state["x"], e_t], 1)
        ts = None
        if timestamp is not None:
            t_new = timestamp.reshape(-1, 1).float()  # the clock in full precision, whatever the inputs' (_elapsed)
            ts = t_new if state["t"] is None else torch.cat([state["t"], t_new], 1)
        if self.config.window is not None:
            xs = xs[:, -self.config.window :]
            ts = None if ts is None else ts[:, -self.config.window :]
        y = self._sequence(xs, ts if self.accepts_time else None, None)[:, -1]
        return y, {"x": xs, "t": ts}


def _elapsed(timestamps: Tensor | None, x: Tensor, last: Tensor | None = None) -> Tensor:
    """(B, T) time since the previous step; the first step counts as one unit of time. The gaps are taken in the
    timestamps' own precision and then cast to the inputs': a half-precision clock cannot tell a frame 300 s into an
    episode from the next one, while the gap between them is a small number that it holds well."""
    b, t, _ = x.shape
    if timestamps is None:
        return torch.ones(b, t, dtype=x.dtype, device=x.device)
    ts = timestamps.float()
    prev = ts[:, :1] - 1.0 if last is None else last.reshape(-1, 1).float()
    return torch.diff(ts, dim=1, prepend=prev).to(x.dtype)


class _Readout(SequenceHead):
    """Heads whose core has width d_model, followed by a linear map to output_dim if needed."""

    def __init__(self, config: HeadConfig) -> None:
        super().__init__(config)
        self.readout: nn.Module = (
            nn.Identity() if config.out_dim == config.d_model else nn.Linear(config.d_model, config.out_dim)
        )


# ---------------------------------------------------------------------- NAC and ablations
@register("nac")
class NACHead(_Readout):
    """The NAC layer (nac/layer.py) and its ablations: nac-pw uses every key, nac-fc dense gates,
    nac-XXsfc randomly sparse gates, nac-phi-* another phi activation, nac-const no ODE logits."""

    accepts_time = True
    is_attention = True

    def __init__(self, config: HeadConfig) -> None:
        super().__init__(config)
        self.nac = NAC(config=config.nac_config())

    def embed_steps(self, x: Tensor) -> Tensor:
        return self.nac.embed(x)

    def _sequence(self, x: Tensor, timestamps: Tensor | None, key_padding_mask: Tensor | None) -> Tensor:
        sequences = self.config.return_sequences  # with False NAC computes only the last query
        y = self.readout(self.nac.attend(x, timestamps, key_padding_mask, return_sequences=sequences))
        return y if sequences else y[:, None]

    def last_step_attention(self, x: Tensor, timestamps: Tensor | None = None, effective: bool = True) -> Tensor | None:
        _, details = self.nac(x, timestamps if self.accepts_time else None, return_details=True, return_sequences=False)
        w = details.effective if effective else details.weights  # (B, H, 1, K)
        b, h = w.shape[:2]
        dense = x.new_zeros(b, h, x.shape[1]).scatter_add(-1, details.indices[:, :, 0], w[:, :, 0])
        return dense.mean(1)  # (B, T)

    def init_state(self, batch_size: int = 1) -> Any:
        return self.nac.init_state(batch_size)

    def step(self, x_t: Tensor, state: Any, timestamp: Tensor | None = None) -> tuple[Tensor, Any]:
        y, state = self.nac.step(x_t, state, timestamp)
        return self.readout(y), state


# The paper's ablations (Appendix D.2) and the no-ODE ablation, as configurations of the one layer.
NAC_VARIANTS: dict[str, dict[str, Any]] = {
    "nac-pw": {"selection": "pairwise"},
    "nac-fc": {"gates": "dense"},
    "nac-2k": {"topk": 2},
    "nac-32k": {"topk": 32},
    "nac-02s": {"sparsity": 0.2},
    "nac-09s": {"sparsity": 0.9},
    "nac-09sfc": {"gates": "sparse", "sparsity": 0.9},
    "nac-05sfc": {"gates": "sparse", "sparsity": 0.5},
    "nac-02sfc": {"gates": "sparse", "sparsity": 0.2},
    "nac-phi-none": {"phi_activation": "none"},
    "nac-phi-tanh": {"phi_activation": "tanh"},
    "nac-euler": {"mode": "euler"},
    "nac-steady": {"mode": "steady"},
    "nac-const": {"logits": "constant"},  # no ODE: a uniform softmax over the selected keys
}
for _name, _preset in NAC_VARIANTS.items():
    register(_name, **_preset)(NACHead)


# ---------------------------------------------------------------------- recurrent baselines
class _Recurrent(_Readout):
    """Recurrent heads stream by carrying their state; with a window they rerun it instead
    (a recurrent state cannot forget what left the window)."""

    def init_state(self, batch_size: int = 1) -> Any:
        return super().init_state(batch_size) if self.config.window is not None else self._init_state(batch_size)

    def step(self, x_t: Tensor, state: Any, timestamp: Tensor | None = None) -> tuple[Tensor, Any]:
        if self.config.window is not None:
            return super().step(x_t, state, timestamp)
        return self._step(x_t, state, timestamp)

    def _init_state(self, batch_size: int) -> Any:
        raise NotImplementedError

    def _step(self, x_t: Tensor, state: Any, timestamp: Tensor | None) -> tuple[Tensor, Any]:
        raise NotImplementedError


class _TorchRNN(_Recurrent):
    rnn_cls: ClassVar[type[nn.RNNBase]]

    def __init__(self, config: HeadConfig) -> None:
        super().__init__(config)
        self.rnn = self.rnn_cls(config.input_dim, config.d_model, batch_first=True)

    def _run(self, x: Tensor, state: Any) -> tuple[Tensor, Any]:
        """torch's RNN in float32 whatever autocast asks: oneDNN has no bfloat16 LSTM on many CPUs (it raises), and the
        recurrence is a small share of a driving network's step."""
        if not torch.amp.is_autocast_available(x.device.type):  # no autocast to leave (the meta device)
            return self.rnn(x.float(), state)
        with torch.autocast(x.device.type, enabled=False):
            return self.rnn(x.float(), state)

    def _sequence(self, x: Tensor, timestamps: Tensor | None, key_padding_mask: Tensor | None) -> Tensor:
        return self.readout(self._run(x, None)[0])

    def _init_state(self, batch_size: int) -> Any:
        return None  # torch RNNs start from zeros

    def _step(self, x_t: Tensor, state: Any, timestamp: Tensor | None) -> tuple[Tensor, Any]:
        y, state = self._run(x_t[:, None], state)
        return self.readout(y[:, 0]), state


@register("rnn")
class RNNHead(_TorchRNN):
    rnn_cls = nn.RNN


@register("lstm")
class LSTMHead(_TorchRNN):
    rnn_cls = nn.LSTM


@register("gru")
class GRUHead(_TorchRNN):
    rnn_cls = nn.GRU


class _TimedCellHead(_Recurrent):
    """A recurrent cell stepped over time with each step's elapsed time (from timestamps, or
    one unit per step without them); subclasses give the cell and its state size."""

    accepts_time = True

    def _cell(self, x_t: Tensor, h: Tensor, dt: Tensor) -> tuple[Tensor, Tensor]:
        """x_t (B, D), h (B, S), dt (B, 1) -> output (B, d_model), new state (B, S)."""
        raise NotImplementedError

    def _state_size(self) -> int:
        return self.config.d_model

    def _run(self, x: Tensor, h: Tensor | None, dts: Tensor) -> tuple[Tensor, Tensor]:
        """x (B, T, D), dts (B, T) -> outputs (B, T, d_model), last state."""
        if h is None:
            h = x.new_zeros(x.shape[0], self._state_size())
        outs = []
        for i in range(x.shape[1]):
            y, h = self._cell(x[:, i], h, dts[:, i : i + 1])
            outs.append(y)
        return torch.stack(outs, 1), h

    def _sequence(self, x: Tensor, timestamps: Tensor | None, key_padding_mask: Tensor | None) -> Tensor:
        return self.readout(self._run(x, None, _elapsed(timestamps, x))[0])

    def _init_state(self, batch_size: int) -> Any:
        return {"h": None, "t": None}

    def _step(self, x_t: Tensor, state: Any, timestamp: Tensor | None) -> tuple[Tensor, Any]:
        ts = None if timestamp is None else timestamp.reshape(-1, 1)
        dt = _elapsed(ts, x_t[:, None], None if ts is None else state["t"])
        y, h = self._run(x_t[:, None], state["h"], dt)
        return self.readout(y[:, 0]), {"h": h, "t": ts}


class _NCPSHead(_TimedCellHead):
    """CfC / LTC from ncps.torch.

    We step `ncps`'s own cell (`.rnn_cell`) rather than calling the CfC / LTC module: the
    module squeezes `timespans[:, t]` to (B,), which broadcasts against (B, units) wrongly
    for any batch size other than 1 (ncps 1.0.1); the cell takes (B, 1) correctly.
    """

    ncps_cls: ClassVar[type[nn.Module]]

    def __init__(self, config: HeadConfig) -> None:
        super().__init__(config)
        self.ncps = self.ncps_cls(config.input_dim, config.d_model, batch_first=True)

    def _state_size(self) -> int:
        return self.ncps.state_size

    def _cell(self, x_t: Tensor, h: Tensor, dt: Tensor) -> tuple[Tensor, Tensor]:
        return self.ncps.rnn_cell(x_t, h, dt)


@register("cfc")
class CfCHead(_NCPSHead):
    ncps_cls = CfC


@register("ltc")
class LTCHead(_NCPSHead):
    """LTC from ncps.torch, whose fused solver divides by the elapsed time (cm / (dt / unfolds)).

    A zero gap is real here: a window at an episode's start repeats its first frame at the same
    time. Its limit (dt -> 0: the capacitance term dominates, the state does not move) is taken
    exactly; the solver sees a positive gap so that neither branch of the choice is NaN (0 * inf
    in the backward pass otherwise)."""

    ncps_cls = LTC

    def _cell(self, x_t: Tensor, h: Tensor, dt: Tensor) -> tuple[Tensor, Tensor]:
        moved = dt > 0
        y, h_new = super()._cell(x_t, h, torch.where(moved, dt, torch.ones_like(dt)))
        h_new = torch.where(moved, h_new, h)
        return torch.where(moved, y, self.ncps.rnn_cell._map_outputs(h)), h_new


@register("ctrnn")
class CTRNNHead(_TimedCellHead):
    """Continuous-time RNN: dh/dt = -h / tau + tanh(W_x x + W_h h + b), Euler-unfolded.

    Written here because ncps.torch has no CT-RNN (it has CfC and LTC); the formulation is
    the one the CT-RNN baseline of the NAC paper uses (rubanova2019latent).
    """

    unfolds = 6

    def __init__(self, config: HeadConfig) -> None:
        super().__init__(config)
        self.inp = nn.Linear(config.input_dim, config.d_model)
        self.rec = nn.Linear(config.d_model, config.d_model, bias=False)
        self.log_tau = nn.Parameter(torch.zeros(config.d_model))  # tau = exp(.) > 0

    def _cell(self, x_t: Tensor, h: Tensor, dt: Tensor) -> tuple[Tensor, Tensor]:
        drive = self.inp(x_t)
        inv_tau = torch.exp(-self.log_tau)
        h_step = dt / self.unfolds  # (B, 1)
        for _ in range(self.unfolds):
            h = h + h_step * (-h * inv_tau + torch.tanh(drive + self.rec(h)))
        return h, h


# ---------------------------------------------------------------------- attention baselines
def _attn_mask(x: Tensor, cfg: HeadConfig, n_queries: int) -> Tensor | None:
    """(Tq, T) bool, True = may attend, for the last n_queries of x's steps."""
    t = x.shape[1]
    pos = torch.arange(t, device=x.device)
    return allowed_keys(pos[t - n_queries :], pos, cfg.causal, cfg.window)


def _sdpa_mask(x: Tensor, cfg: HeadConfig, n_queries: int, key_padding_mask: Tensor | None, lead: int) -> Tensor | None:
    """scaled_dot_product_attention's mask (True = may attend): the causal / window rule and the
    key padding, broadcast over the `lead` dims between batch and query of the attention's input
    (1 for (B, Tq, d), 2 for (B, H, Tq, d))."""
    mask = _attn_mask(x, cfg, n_queries)  # (Tq, T)
    if key_padding_mask is not None:
        keep = ~key_padding_mask.reshape(x.shape[0], *(1,) * lead, x.shape[1])  # (B, 1.., T)
        mask = keep if mask is None else mask & keep
    return mask


def _last_step_softmax(q: Tensor, k: Tensor, x: Tensor, cfg: HeadConfig) -> Tensor:
    """(..., T): the last step's attention softmax, from its query q (..., 1, d) and the keys k (..., T, d)."""
    logits = (q @ k.transpose(-1, -2))[..., 0, :] / k.shape[-1] ** 0.5
    allowed = _attn_mask(x, cfg, 1)
    if allowed is not None:
        logits = logits.masked_fill(~allowed[0], float("-inf"))
    return logits.softmax(-1)


@register("mha")
class MHAHead(_Readout):
    """torch.nn.MultiheadAttention over a linear embedding of the steps (no positions)."""

    is_attention = True

    def __init__(self, config: HeadConfig) -> None:
        super().__init__(config)
        need(config.d_model % config.num_heads == 0, "d_model must be divisible by num_heads")
        self.embed = nn.Linear(config.input_dim, config.d_model)
        self.mha = nn.MultiheadAttention(config.d_model, config.num_heads, batch_first=True)

    def embed_steps(self, x: Tensor) -> Tensor:
        return self.embed(x)

    def _sequence(self, e: Tensor, timestamps: Tensor | None, key_padding_mask: Tensor | None) -> Tensor:
        q = e if self.config.return_sequences else e[:, -1:]
        allowed = _attn_mask(e, self.config, q.shape[1])
        y, _ = self.mha(q, e, e, key_padding_mask=key_padding_mask, attn_mask=None if allowed is None else ~allowed, need_weights=False)
        return self.readout(y)

    def last_step_attention(self, x: Tensor, timestamps: Tensor | None = None, effective: bool = True) -> Tensor | None:
        e = self.embed(x)
        allowed = _attn_mask(x, self.config, 1)
        _, w = self.mha(e[:, -1:], e, e, attn_mask=None if allowed is None else ~allowed, need_weights=True)
        return w[:, 0]  # (B, T), averaged over heads by torch


@register("mha-rope")
class RotaryMHAHead(_Readout):
    """Multi-head attention whose scores see how far apart two steps are in time: rotary position
    embedding (RoFormer, Su et al. 2021) with each step's timestamp as its position, so that
    q_i . k_j depends on t_i - t_j (irregular gaps included) and never on the absolute time.

    torch.nn.MultiheadAttention ("mha") sees the window as an unordered set: the current frame
    enters only through the query, and no head can single out the frame before it. Written here
    because torch and ncps have no rotary attention and its projections sit inside
    nn.MultiheadAttention; the attention itself is torch's scaled_dot_product_attention."""

    accepts_time = True
    is_attention = True
    BASE = 100.0  # rotation periods 2 pi .. 2 pi * BASE^((dh - 2) / dh) steps: 6 to ~350 frames at 16 dims per head,
    # the span of a window of 8 frames with gaps of 1..3 (the usual RoPE base 10000 leaves most pairs still over it)

    def __init__(self, config: HeadConfig) -> None:
        super().__init__(config)
        need(config.d_model % config.num_heads == 0, "d_model must be divisible by num_heads")
        dh = config.d_model // config.num_heads
        need(dh % 2 == 0, f"mha-rope needs an even width per attention head (d_model / num_heads = {dh})")
        self.qkv = nn.Linear(config.input_dim, 3 * config.d_model)
        self.proj = nn.Linear(config.d_model, config.d_model)
        self.register_buffer("freqs", self.BASE ** (-torch.arange(0, dh, 2, dtype=torch.float32) / dh), persistent=False)

    def _rotate(self, x: Tensor, t: Tensor) -> Tensor:
        """x (B, H, T, dh) rotated pairwise by the angles t (B, T) x freqs."""
        ang = t[:, None, :, None] * self.freqs  # (B, 1, T, dh/2)
        cos, sin = ang.cos(), ang.sin()
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).flatten(-2)

    def embed_steps(self, x: Tensor) -> Tensor:
        return self.qkv(x)

    def _qkv(self, e: Tensor, timestamps: Tensor | None, n_queries: int) -> tuple[Tensor, Tensor, Tensor]:
        """From embedded steps (B, T, 3 d_model): the rotated queries (of the last n_queries steps) and keys, and the values."""
        b, t, _ = e.shape
        h = self.config.num_heads
        if timestamps is None:
            timestamps = torch.arange(t, dtype=e.dtype, device=e.device).expand(b, t)
        rel = (timestamps - timestamps[:, -1:]).to(e.dtype)  # only differences matter: keep the angles small
        q, k, v = e.reshape(b, t, 3, h, -1).permute(2, 0, 3, 1, 4)  # each (B, H, T, dh)
        return self._rotate(q, rel)[:, :, t - n_queries :], self._rotate(k, rel), v

    def _sequence(self, x: Tensor, timestamps: Tensor | None, key_padding_mask: Tensor | None) -> Tensor:
        n = x.shape[1] if self.config.return_sequences else 1
        q, k, v = self._qkv(x, timestamps, n)
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=_sdpa_mask(x, self.config, n, key_padding_mask, lead=2))  # (B, H, n, dh)
        return self.readout(self.proj(y.transpose(1, 2).flatten(2)))

    def last_step_attention(self, x: Tensor, timestamps: Tensor | None = None, effective: bool = True) -> Tensor | None:
        q, k, _ = self._qkv(self.qkv(x), timestamps, 1)
        return _last_step_softmax(q, k, x, self.config).mean(1)  # (B, H, T) -> (B, T)


@register("attention")
class AttentionHead(_Readout):
    """Single-head scaled dot-product attention."""

    is_attention = True

    def __init__(self, config: HeadConfig) -> None:
        super().__init__(config)
        self.q = nn.Linear(config.input_dim, config.d_model)
        self.k = nn.Linear(config.input_dim, config.d_model)
        self.v = nn.Linear(config.input_dim, config.d_model)

    def embed_steps(self, x: Tensor) -> Tensor:
        return torch.cat([self.q(x), self.k(x), self.v(x)], -1)

    def _sequence(self, e: Tensor, timestamps: Tensor | None, key_padding_mask: Tensor | None) -> Tensor:
        q, k, v = e.split(self.config.d_model, -1)
        q = q if self.config.return_sequences else q[:, -1:]
        mask = _sdpa_mask(e, self.config, q.shape[1], key_padding_mask, lead=1)
        return self.readout(F.scaled_dot_product_attention(q, k, v, attn_mask=mask))

    def last_step_attention(self, x: Tensor, timestamps: Tensor | None = None, effective: bool = True) -> Tensor | None:
        return _last_step_softmax(self.q(x[:, -1:]), self.k(x), x, self.config)  # (B, 1, d), (B, T, d) -> (B, T)
