"""The Neuronal Attention Circuit (NAC) layer, as the paper writes it (see NAC.md).

For a query i and a selected key j the pair p_ij = [q_i, k_j] drives a sparse NCP backbone
(inter -> command -> motor) and two heads, phi (sigmoid) and omega_tau (softplus + eps); the
logit a_ij is the state of  da/dt = -omega_tau * a + phi  at horizon t_ij (exact, euler or
steady), and the output is  sum_j softmax_j(a_ij) * w_ij * v_j  over the selected keys.

Unlike the authors' Keras layer (and torch-nac 0.0.2), the backbone is a feed-forward pass of
the pair, so phi and omega_tau depend on q and k (see NAC.md, "A defect ...").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from nac.checkpoint import build_loaded, load_checkpoint, save_checkpoint
from nac.config import ConfigDict, ConfigError, check_ranges, need
from nac.ode import MODES, solve
from nac.selection import KeyRule, gather, topk_exact, topk_sqrt
from nac.wiring import MAX_SPARSITY, MIN_SPARSITY, backbone_masks, random_mask, sensory_mask

SELECTIONS = ("topk", "pairwise", "sqrt")
QUADRATURES = ("time", "dt")
GATES = ("ncp", "dense", "sparse")
PHI_ACTIVATIONS = ("sigmoid", "tanh", "none")
LOGITS = ("ode", "constant")


@dataclass
class NACConfig(ConfigDict):
    """Configuration of one NAC layer. Names follow the authors' layer where they exist."""

    WHAT: ClassVar[str] = "NAC options"

    d_model: int = 64  # model width; split into num_heads heads of d_model / num_heads
    num_heads: int = 16  # attention heads, each with its own backbone parameters
    topk: int = 8  # keys per query for selection "topk" / "sqrt"
    mode: str = "exact"  # logit solver: "exact" (closed form), "euler", "steady"
    euler_steps: int = 6  # explicit Euler steps in mode "euler"
    delta_t: float | None = None  # Euler step size; None integrates to the pair's own t_ij
    sparsity: float = 0.5  # NCP wiring sparsity, 0.1 .. 0.9 (gates "ncp")
    dropout: float = 0.0  # dropout on the attention weights (training only)
    tau_epsilon: float = 1e-5  # omega_tau = softplus(.) + tau_epsilon > 0
    return_sequences: bool = False  # (B, T, d_model) if True, else the last step (B, d_model)
    return_attention: bool = False  # forward also returns dense attention weights (B, H, Tq, T)
    input_dim: int | None = None  # input features; None means d_model
    selection: str = "topk"  # keys per query: "topk" (exact top-K of q.k), "pairwise", "sqrt"
    causal: bool = False  # a query attends only to keys at or before its own step
    window: int | None = None  # with causal: only the last `window` keys (incl. its own step)
    quadrature: str = "time"  # w_ij = t_ij ("time", the paper's) or the constant dt ("dt")
    dt: float = 1.0  # the constant quadrature weight when quadrature == "dt"
    gates: str = "ncp"  # "ncp" wiring masks; "dense" (the paper's NAC-FC) or "sparse": random masks at `sparsity` (NAC-09sFC ...)
    phi_activation: str = "sigmoid"  # phi = sigmoid(.) (the paper's NAC); "tanh" or "none" allow negative logits (NAC-phi rows)
    logits: str = "ode"  # "ode": a_ij from the ODE; "constant": every selected key gets the same logit (ablation: no ODE)
    block_size: int | None = None  # selection "sqrt": keys per block; None: ceil(sqrt(T)) (the paper's); fixed: a stream sees the full pass's blocks
    backbone_units: int = 16  # AutoNCP units of the pair backbone (inter + command + motor)
    motor_neurons: int = 4  # motor neurons feeding the phi and omega_tau heads
    seed: int = 0  # wiring seed; projection p uses seed + p (q, k, v, backbone = 0, 1, 2, 3)

    def __post_init__(self) -> None:
        check_ranges(self)
        need(self.d_model >= 1 and self.num_heads >= 1, "d_model and num_heads must be >= 1")
        need(
            self.d_model % self.num_heads == 0,
            f"d_model ({self.d_model}) must be divisible by num_heads ({self.num_heads})",
        )
        need(self.topk >= 1, f"topk must be >= 1 (got {self.topk})")
        need(self.mode in MODES, f"mode must be one of {', '.join(MODES)} (got {self.mode!r})")
        need(self.euler_steps >= 1, f"euler_steps must be >= 1 (got {self.euler_steps})")
        need(self.delta_t is None or self.delta_t > 0, f"delta_t must be > 0 (got {self.delta_t})")
        need(
            self.selection in SELECTIONS,
            f"selection must be one of {', '.join(SELECTIONS)} (got {self.selection!r})",
        )
        need(
            self.quadrature in QUADRATURES,
            f"quadrature must be one of {', '.join(QUADRATURES)} (got {self.quadrature!r})",
        )
        need(self.gates in GATES, f"gates must be one of {', '.join(GATES)} (got {self.gates!r})")
        need(self.phi_activation in PHI_ACTIVATIONS, f"phi_activation must be one of {', '.join(PHI_ACTIVATIONS)} (got {self.phi_activation!r})")
        need(self.logits in LOGITS, f"logits must be one of {', '.join(LOGITS)} (got {self.logits!r})")
        need(self.block_size is None or self.block_size >= 1, f"block_size must be >= 1 (got {self.block_size})")
        if self.gates in ("ncp", "sparse"):
            need(
                MIN_SPARSITY <= self.sparsity <= MAX_SPARSITY,
                f"sparsity must be between {MIN_SPARSITY} and {MAX_SPARSITY} (got {self.sparsity})",
            )
        need(0.0 <= self.dropout < 1.0, f"dropout must be in [0, 1) (got {self.dropout})")
        need(self.tau_epsilon > 0, f"tau_epsilon must be > 0 (got {self.tau_epsilon})")
        need(self.window is None or self.window >= 1, f"window must be >= 1 (got {self.window})")
        need(self.window is None or self.causal, "window needs causal=True")
        need(
            self.motor_neurons >= 1 and self.backbone_units >= self.motor_neurons + 4,
            "backbone_units must be at least motor_neurons + 4 (an NCP needs inter and command "
            f"neurons; got backbone_units={self.backbone_units}, motor_neurons={self.motor_neurons})",
        )
        need(self.input_dim is None or self.input_dim >= 1, "input_dim must be >= 1")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads



class NACDetails(NamedTuple):
    """Per selected pair, for interpretability. Shapes (B, H, Tq, K)."""

    weights: Tensor  # softmax attention weights (0 for invalid keys)
    indices: Tensor  # key index of each selected pair (long)
    valid: Tensor  # bool: the pair is a real, allowed key
    effective: Tensor  # the weight the output gives each key: softmax x quadrature weight (t_ij or dt)
    phi: Tensor  # content-target gate
    omega_tau: Tensor  # time-constant gate
    t: Tensor  # the time vector t_ij (also the quadrature weight when quadrature == "time")
    logits: Tensor  # a_ij before the softmax


class _HeadwiseMasked(nn.Module):
    """y = x @ (W * mask) + b with one weight per attention head: W (H, n_in, n_out).

    A masked dense weight rather than a sparse tensor: the NCP layers here are a few dozen
    neurons wide, where dense matmuls are faster than sparse kernels.
    """

    def __init__(self, heads: int, mask: Tensor, bias: bool = True) -> None:
        super().__init__()
        n_in, n_out = mask.shape
        self.register_buffer("mask", mask.clone())
        fan_in = mask.sum(0).clamp(min=1.0)  # (n_out,) real inputs of each neuron
        bound = 1.0 / fan_in.sqrt()
        self.weight = nn.Parameter((torch.rand(heads, n_in, n_out) * 2 - 1) * bound)
        self.bias = nn.Parameter((torch.rand(heads, n_out) * 2 - 1) * bound) if bias else None

    def masked_weight(self) -> Tensor:
        return self.weight * self.mask  # (H, n_in, n_out)

    def forward(self, x: Tensor) -> Tensor:  # x (B, H, ..., n_in)
        w = self.masked_weight()
        lead = x.shape[2:-1]
        y = torch.einsum("bhmi,hio->bhmo", x.reshape(*x.shape[:2], -1, x.shape[-1]), w)
        if self.bias is not None:
            y = y + self.bias[None, :, None, :]
        return y.reshape(*x.shape[:2], *lead, -1)


class _MaskedLinear(nn.Linear):
    """A linear map whose weight is multiplied by a fixed binary (NCP sensory) mask."""

    def __init__(self, mask: Tensor) -> None:
        n_in, n_out = mask.shape
        super().__init__(n_in, n_out)
        self.register_buffer("mask", mask.t().contiguous())  # (n_out, n_in) like weight
        bound = 1.0 / self.mask.sum(1, keepdim=True).clamp(min=1.0).sqrt()
        with torch.no_grad():
            self.weight.uniform_(-1.0, 1.0).mul_(bound)
            self.bias.uniform_(-1.0, 1.0).mul_(bound.squeeze(1))

        self._cache: tuple[tuple[int, ...], Tensor] | None = None

    def masked_weight(self) -> Tensor:
        if torch.is_grad_enabled() or self.training:
            return self.weight * self.mask
        # In eval mode without autograd (closed loop), reuse the product until the weight or mask
        # changes: a step streams one input row, so the 155k-element product would otherwise cost
        # more than the matmul. In-place updates bump _version (a load, an EMA copy) and moving
        # devices changes data_ptr, but torch's fused Adam updates the weight without bumping
        # _version, so the cache is also dropped whenever the mode changes (train()/eval(): the
        # training loop leaves train mode for every validation); without that, validation and
        # closed-loop checkpoint choice ran on the first validation's product for good.
        key = (self.weight._version, self.weight.data_ptr(), self.mask._version, self.mask.data_ptr())
        if self._cache is None or self._cache[0] != key:
            self._cache = (key, self.weight * self.mask)
        return self._cache[1]

    def train(self, mode: bool = True) -> "_MaskedLinear":
        self._cache = None
        return super().train(mode)

    def forward(self, x: Tensor) -> Tensor:
        return F.linear(x, self.masked_weight(), self.bias)


class NAC(nn.Module):
    """Neuronal Attention Circuit. Input (B, T, input_dim), optional timestamps (B, T).

    Output (B, d_model) for the last step, or (B, T, d_model) with return_sequences; with
    return_attention also the dense attention weights (B, H, Tq, T).
    """

    def __init__(self, d_model: int = 64, num_heads: int = 16, *, config: NACConfig | None = None, **kwargs: Any) -> None:
        super().__init__()
        cfg = config if config is not None else NACConfig.from_dict({"d_model": d_model, "num_heads": num_heads, **kwargs})
        self.config = cfg
        d_in = cfg.input_dim or cfg.d_model
        hd, n_motor = cfg.head_dim, cfg.motor_neurons

        def sens(n_in: int, n_out: int, offset: int) -> Tensor:
            if cfg.gates == "dense":
                return torch.ones(n_in, n_out)
            if cfg.gates == "sparse":
                return torch.from_numpy(random_mask(n_in, n_out, cfg.sparsity, cfg.seed + offset))
            return torch.from_numpy(sensory_mask(n_in, n_out, cfg.sparsity, cfg.seed + offset))

        # Sensory gates (Eq. 13): sparse projections of the input to q, k, v.
        self.q_proj = _MaskedLinear(sens(d_in, cfg.d_model, 0))
        self.k_proj = _MaskedLinear(sens(d_in, cfg.d_model, 1))
        self.v_proj = _MaskedLinear(sens(d_in, cfg.d_model, 2))

        # Backbone (Eq. 14) on the pair [q_i, k_j] (2 * head_dim inputs).
        if cfg.gates in ("dense", "sparse"):  # an MLP of the NCP's layer sizes, fully or randomly connected
            n_inter = cfg.backbone_units - n_motor - max(int(0.4 * (cfg.backbone_units - n_motor)), 1)
            n_cmd = cfg.backbone_units - n_motor - n_inter
            shapes = ((2 * hd, n_inter), (n_inter, n_cmd), (n_cmd, n_motor))
            if cfg.gates == "dense":
                m_si, m_ic, m_cm = (torch.ones(*sh) for sh in shapes)
            else:
                m_si, m_ic, m_cm = (torch.from_numpy(random_mask(*sh, cfg.sparsity, cfg.seed + 3 + i)) for i, sh in enumerate(shapes))
        else:
            bm = backbone_masks(2 * hd, cfg.backbone_units, n_motor, cfg.sparsity, cfg.seed + 3)
            m_si, m_ic, m_cm = (torch.from_numpy(m) for m in (bm.sensory_inter, bm.inter_command, bm.command_motor))
        self.n_inter = m_si.shape[1]
        # The first backbone layer and the time vector's affine maps a_t, b_t are linear in the
        # pair, so they are one masked map whose query half and key half are applied separately
        # (to each query once and each key once) and summed per selected pair: the same numbers
        # as mapping the concatenation, without building the (pairs x 2*head_dim) tensor.
        pair_mask = torch.cat([m_si, torch.ones(2 * hd, 2)], dim=1)  # (2hd, n_inter + 2)
        self.pair_in = _HeadwiseMasked(cfg.num_heads, pair_mask)
        self.inter_command = _HeadwiseMasked(cfg.num_heads, m_ic)
        self.command_motor = _HeadwiseMasked(cfg.num_heads, m_cm)
        # Two heads (Eq. 15-16): column 0 -> phi, column 1 -> omega_tau.
        self.gate_heads = _HeadwiseMasked(cfg.num_heads, torch.ones(n_motor, 2))
        self.out_proj = nn.Linear(cfg.d_model, cfg.d_model)
        self.attn_dropout = nn.Dropout(cfg.dropout)

    # ------------------------------------------------------------------ building blocks
    def _split(self, x: Tensor) -> Tensor:  # (B, T, d_model) -> (B, H, T, hd)
        b, t, _ = x.shape
        return x.view(b, t, self.config.num_heads, self.config.head_dim).transpose(1, 2)

    def embed(self, x: Tensor) -> Tensor:
        """The sensory gates (Eq. 13) on each step: (..., input_dim) -> (..., 3 d_model), q | k | v. They act on
        each step alone, so a caller whose windows share steps (training on overlapping windows of frames) maps
        each step once and hands the windows of mapped steps to attend()."""
        return torch.cat([self.q_proj(x), self.k_proj(x), self.v_proj(x)], -1)

    def project(self, e: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor]:
        """From embedded steps (B, T, 3 d_model): q, k, v (B, H, T, hd) and the query / key halves of the pair map
        (B, H, T, n+2)."""
        q, k, v = (self._split(p) for p in e.split(self.config.d_model, -1))
        return (q, k, v, *self.pair_halves(q, k))

    def pair_halves(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """The pair map applied to queries and keys separately: (B, H, T, n+2) each."""
        w = self.pair_in.masked_weight()  # (H, 2hd, n_inter + 2)
        hd = self.config.head_dim
        uq = torch.einsum("bhtd,hdn->bhtn", q, w[:, :hd]) + self.pair_in.bias[None, :, None, :]
        uk = torch.einsum("bhtd,hdn->bhtn", k, w[:, hd:])
        return uq, uk

    @torch.no_grad()
    def _select(self, q: Tensor, k: Tensor, rule: KeyRule) -> tuple[Tensor | None, Tensor]:
        """Key indices (B, H, Tq, K) or None (all keys), and their validity (B, H|1, Tq, K).

        Selection picks indices only; no gradient flows through it.
        """
        cfg = self.config
        tk = k.shape[2]
        if cfg.selection == "pairwise" or cfg.topk >= tk and cfg.selection == "topk":
            return None, rule.mask(q.shape[0])
        if cfg.selection == "topk":
            return topk_exact(q, k, rule, cfg.topk)
        return topk_sqrt(q, k, rule, cfg.topk, cfg.block_size)

    def attend_selected(
        self,
        q: Tensor,
        uq: Tensor,
        k: Tensor,
        uk: Tensor,
        v: Tensor,
        tq: Tensor | None,
        tk: Tensor | None,
        rule: KeyRule,
    ) -> tuple[Tensor, NACDetails]:
        """Attention of queries q (B, H, Tq, hd) over keys k, v (B, H, Tk, hd).

        rule says which keys each query may use; tq (B, Tq) / tk (B, Tk) are timestamps or None.
        """
        cfg = self.config
        idx, valid = self._select(q, k, rule)  # (B, H, Tq, K) | None, (B, H|1, Tq, K)
        # Backbone on the selected pairs (B, H, Tq, K, .): first layer = query half + key half.
        pre = uq.unsqueeze(3) + gather(uk, idx)  # (B, H, Tq, K, n_inter + 2)
        n = self.n_inter
        h = torch.tanh(pre[..., :n])
        h = torch.tanh(self.inter_command(h))
        h = torch.tanh(self.command_motor(h))
        g = self.gate_heads(h)  # (B, H, Tq, K, 2)
        phi = {"sigmoid": torch.sigmoid, "tanh": torch.tanh, "none": lambda z: z}[cfg.phi_activation](g[..., 0])
        omega = F.softplus(g[..., 1]) + cfg.tau_epsilon
        # Time vector t_ij = sigmoid(a_t(p) * t + b_t(p)); t is the key's age t_i - t_j when
        # timestamps are given (invariant to a shift of the clock, which streaming needs),
        # else 1 (NAC.md section 3).
        if tq is None or tk is None:
            t_in = torch.ones((), dtype=pre.dtype, device=pre.device)
        else:
            t_keys = gather(tk[:, None, :, None].expand(-1, cfg.num_heads, -1, 1), idx)[..., 0]
            t_in = tq[:, None, :, None] - t_keys  # (B, H, Tq|1, K)
        t_ij = torch.sigmoid(pre[..., n] * t_in + pre[..., n + 1])
        if cfg.logits == "ode":
            logits = solve(phi, omega, t_ij, cfg.mode, cfg.euler_steps, cfg.delta_t)
        else:  # ablation: the same logit for every key, so the softmax is uniform over the selected keys
            logits = torch.zeros_like(t_ij)
        logits = logits.masked_fill(~valid, float("-inf"))
        weights = torch.softmax(logits, dim=-1).masked_fill(~valid, 0.0)  # rows with no key -> 0
        weights = self.attn_dropout(weights)
        quad = t_ij if cfg.quadrature == "time" else cfg.dt
        effective = weights * quad  # (B, H, Tq, K): what each key's value is multiplied by
        wv = effective.unsqueeze(-2)  # (B, H, Tq, 1, K)
        out = (wv @ gather(v, idx)).squeeze(-2)  # (B, H, Tq, hd)
        if idx is None:
            b, hh, tqn, tkn = weights.shape
            idx = torch.arange(tkn, device=q.device).expand(b, hh, tqn, tkn)
        details = NACDetails(weights, idx, valid.expand_as(weights), effective.expand_as(weights), phi, omega, t_ij.expand_as(weights), logits)
        return out, details

    def _merge(self, out: Tensor) -> Tensor:  # (B, H, Tq, hd) -> (B, Tq, d_model)
        b, _, t, _ = out.shape
        return self.out_proj(out.transpose(1, 2).reshape(b, t, self.config.d_model))

    # ------------------------------------------------------------------ public API
    def forward(
        self,
        x: Tensor,
        timestamps: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        return_details: bool = False,
        return_sequences: bool | None = None,
    ) -> Any:
        """x (B, T, input_dim); timestamps (B, T) or None; key_padding_mask (B, T), True = pad;
        return_sequences overrides the config's for this call."""
        if x.dim() != 3:
            raise ValueError(f"NAC expects input of shape (B, T, D), got {tuple(x.shape)}")
        return self.attend(self.embed(x), timestamps, key_padding_mask, return_details, return_sequences)

    def attend(
        self,
        e: Tensor,
        timestamps: Tensor | None = None,
        key_padding_mask: Tensor | None = None,
        return_details: bool = False,
        return_sequences: bool | None = None,
    ) -> Any:
        """forward() on steps already embedded (B, T, 3 d_model), embed()'s output."""
        cfg = self.config
        sequences = cfg.return_sequences if return_sequences is None else return_sequences
        if e.dim() != 3 or e.shape[-1] != 3 * cfg.d_model:
            raise ValueError(f"NAC.attend expects embedded steps of shape (B, T, {3 * cfg.d_model}), got {tuple(e.shape)}")
        b, t, _ = e.shape
        q, k, v, uq, uk = self.project(e)
        pos = torch.arange(t, device=e.device)
        if not sequences:  # only the last query is needed
            q, uq, pos_q = q[:, :, -1:], uq[:, :, -1:], pos[-1:]
            tq = None if timestamps is None else timestamps[:, -1:]
        else:
            pos_q, tq = pos, timestamps
        rule = KeyRule(pos_q, pos, cfg.causal, cfg.window, key_padding_mask)
        out, details = self.attend_selected(q, uq, k, uk, v, tq, timestamps, rule)
        y = self._merge(out)  # (B, Tq, d_model)
        if not sequences:
            y = y[:, -1]
        result: list[Any] = [y]
        if cfg.return_attention:
            dense = torch.zeros(b, cfg.num_heads, len(pos_q), t, dtype=details.weights.dtype, device=e.device)
            result.append(dense.scatter_add(-1, details.indices, details.weights))
        if return_details:
            result.append(details)
        return result[0] if len(result) == 1 else tuple(result)

    # Streaming: one new step at a time, past keys' projections cached (NAC.md section 5).
    def init_state(self, batch_size: int = 1) -> dict[str, Any]:
        return {"k": None, "v": None, "uk": None, "t": None, "n": 0}

    def step(
        self, x_t: Tensor, state: dict[str, Any], timestamp: Tensor | None = None, return_details: bool = False
    ) -> Any:
        """x_t (B, input_dim), timestamp (B,) or None -> output (B, d_model), new state.

        Equals the last row of a causal forward over the steps seen so far (the last `window`
        of them when a window is set): the cached keys are exactly those the query may use.
        Exactly so for selections topk and pairwise; for sqrt only with a fixed block_size and
        no window (the blocks then are the full pass's, aligned to absolute positions). With
        block_size None the partition follows the number of keys, so a stream, which has fewer
        keys than a full pass, may select other keys; with a window, the full pass's first block
        may reach outside the window, and its centroid differs from the stream's.
        """
        cfg = self.config
        q, k, v, uq, uk = self.project(self.embed(x_t.unsqueeze(1)))  # each (B, H, 1, .)
        t_new = None if timestamp is None else timestamp.reshape(-1, 1).to(x_t.dtype)
        if state["k"] is not None and (state["t"] is None) != (t_new is None):
            raise ValueError("give a timestamp at every step of a stream or at none")
        def push(old: Tensor | None, new: Tensor, dim: int) -> Tensor:
            cat = new if old is None else torch.cat([old, new], dim=dim)
            n = cat.shape[dim]
            start = 0 if cfg.window is None else max(0, n - cfg.window)
            return cat.narrow(dim, start, n - start)

        state = {
            "k": push(state["k"], k, 2),  # (B, H, L, hd)
            "v": push(state["v"], v, 2),
            "uk": push(state["uk"], uk, 2),  # (B, H, L, n_inter + 2)
            "t": None if t_new is None else push(state["t"], t_new, 1),  # (B, L)
            "n": state.get("n", 0) + 1,  # steps seen: the absolute position of this query is n - 1
        }
        tk, n = state["k"].shape[2], state["n"]
        # The cache holds exactly the keys this query may use (its past within the window), at
        # their absolute positions, so that sqrt's blocks line up with a full pass's.
        rule = KeyRule(torch.full((1,), n - 1, device=x_t.device), torch.arange(n - tk, n, device=x_t.device), causal=True,
                       first_key=n - tk)
        out, details = self.attend_selected(q, uq, state["k"], state["uk"], state["v"], t_new, state["t"], rule)
        y = self._merge(out)[:, 0]
        return (y, state, details) if return_details else (y, state)

    # ------------------------------------------------------------------ persistence
    def save(self, directory: str | Path) -> None:
        """config.json + model.safetensors (no pickles)."""
        save_checkpoint(directory, {"layer": "nac", "nac": asdict(self.config)}, self.state_dict())

    @classmethod
    def load(cls, directory: str | Path, map_location: str = "cpu") -> "NAC":
        config, state = load_checkpoint(directory, map_location)
        if config.get("layer") != "nac":
            raise ConfigError(f"{directory} does not hold a NAC layer (config.json has layer={config.get('layer')!r})")
        return build_loaded(lambda: cls(config=NACConfig.from_dict(config["nac"])), state, directory)
