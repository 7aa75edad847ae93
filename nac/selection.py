"""Which keys each query attends to: the causal / window / padding rule, and NAC's sparse key
selection (exact Top-K of q.k, or the sqrt-blocked approximation), plus the gather of the selected
keys' rows. Separate from the layer because it is index bookkeeping, not the circuit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

# Selection scores are computed in query chunks holding at most this many scores, so that
# neither `topk` nor `sqrt` keeps a (T x T) matrix alive at once.
_SCORE_BUDGET = 1 << 20

def allowed_keys(pos_q: Tensor, pos_k: Tensor, causal: bool, window: int | None) -> Tensor | None:
    """(Tq, Tk) bool: which keys each query may attend to; None when all of them."""
    if not causal:
        return None
    rel = pos_q[:, None] - pos_k[None, :]  # (Tq, Tk): how many steps key j lies before query i
    ok = rel >= 0
    if window is not None:
        ok = ok & (rel < window)
    return ok


@dataclass
class KeyRule:
    """Which keys each query may use: causal / window rule on positions, and key padding.

    Evaluated per chunk of queries (`mask`), so that selection never holds a (Tq x Tk) mask.
    """

    pos_q: Tensor  # (Tq,) position of each query among the keys
    pos_k: Tensor  # (Tk,) consecutive positions
    causal: bool = False
    window: int | None = None
    key_padding_mask: Tensor | None = None  # (B, Tk), True = padding (torch MHA's convention)
    first_key: int = 0  # pos_k[0] as a number: sqrt selection aligns its blocks by it without reading the device

    def mask(self, batch: int, start: int = 0, stop: int | None = None) -> Tensor:
        """(B|1, 1, c, Tk) bool for queries start:stop."""
        pos_q = self.pos_q[start:stop]
        ok = allowed_keys(pos_q, self.pos_k, self.causal, self.window)
        if ok is None:
            ok = torch.ones(len(pos_q), len(self.pos_k), dtype=torch.bool, device=self.pos_k.device)
        ok = ok[None, None]
        if self.key_padding_mask is not None:
            ok = ok & ~self.key_padding_mask[:, None, None, :].to(ok.device)
        return ok.expand(batch, 1, *ok.shape[2:])


def gather(x: Tensor, idx: Tensor | None) -> Tensor:
    """Keys' rows for every selected pair: x (B, H, Tk, n), idx (B, H, Tq, K) -> (B, H, Tq, K, n).

    With idx None (pairwise) the result is a broadcast view (B, H, 1, Tk, n), no copy.
    """
    if idx is None:
        return x.unsqueeze(2)
    b, h, tk, n = x.shape
    offsets = torch.arange(b * h, device=x.device).view(b, h, 1, 1) * tk
    flat = (idx + offsets).reshape(-1)
    return x.reshape(b * h * tk, n).index_select(0, flat).view(*idx.shape, n)


@torch.no_grad()
def topk_exact(q: Tensor, k: Tensor, rule: KeyRule, topk: int) -> tuple[Tensor, Tensor]:
    """Exact top-K keys of q.k per query, scored in query chunks."""
    b, h, tq, hd = q.shape
    tk = k.shape[2]
    kk = min(topk, tk)
    chunk = max(1, _SCORE_BUDGET // max(1, b * h * tk))
    idx_parts, val_parts = [], []
    kt = k.transpose(-1, -2)
    for s in range(0, tq, chunk):
        scores = q[:, :, s : s + chunk] @ kt  # (B, H, c, Tk)
        scores = scores.masked_fill(~rule.mask(b, s, s + chunk), float("-inf"))
        vals, idx = scores.topk(kk, dim=-1)
        idx_parts.append(idx)
        val_parts.append(vals)
    idx = torch.cat(idx_parts, 2)
    return idx, torch.isfinite(torch.cat(val_parts, 2))


@torch.no_grad()
def topk_sqrt(q: Tensor, k: Tensor, rule: KeyRule, topk: int, block_size: int | None = None) -> tuple[Tensor, Tensor]:
    """Subquadratic top-K (paper, Algorithm 2): square-root block partition of the keys.

    Keys split into blocks of ~sqrt(Tk) keys (or `block_size`); each query scores the block
    centroids, keeps the best blocks until they hold at least K candidates plus one block of
    margin, scores those keys exactly and takes the top K. The (Tq x Tk) score matrix is never
    built; queries are processed in chunks so that memory grows linearly in T. Blocks are aligned
    to the keys' absolute positions (rule.pos_k), so a stream's cache, whose first key may sit
    anywhere, is cut where a full pass would cut it.

    With causal attention the query's own block is always a candidate and never scored by
    its centroid, which would average in future keys and let them decide what the query sees.
    """
    b, h, tq, hd = q.shape
    tk = k.shape[2]
    kk = min(topk, tk)
    bs = block_size or max(1, math.ceil(math.sqrt(tk)))  # None: the block size adapts to T
    lead = rule.first_key % bs  # empty slots before the first key, to align the blocks
    nb = math.ceil((lead + tk) / bs)
    n_sel = min(nb, math.ceil(kk / bs) + 1)
    pad = nb * bs - tk - lead
    k_pad = F.pad(k, (0, 0, lead, pad))  # (B, H, nb*bs, hd)
    counts = F.pad(torch.ones(tk, device=k.device), (lead, pad)).view(nb, bs).sum(1)
    centroids = k_pad.view(b, h, nb, bs, hd).sum(3) / counts[:, None]  # (B, H, nb, hd)
    chunk = max(1, _SCORE_BUDGET // max(1, b * h * (n_sel * bs * hd + nb)))
    idx_parts, val_parts = [], []
    offs = torch.arange(bs, device=k.device)
    blk_ids = torch.arange(nb, device=k.device)
    for s in range(0, tq, chunk):
        qc = q[:, :, s : s + chunk]  # (B, H, c, hd)
        okc = F.pad(rule.mask(b, s, s + chunk), (lead, pad), value=False)  # (B, 1, c, nb*bs)
        c = qc.shape[2]
        block_ok = okc.view(b, 1, c, nb, bs).any(-1)  # (B, 1, c, nb)
        cs = qc @ centroids.transpose(-1, -2)  # (B, H, c, nb)
        if not rule.causal:
            cs = cs.masked_fill(~block_ok, float("-inf"))
            vals, blocks = cs.topk(n_sel, dim=-1)  # (B, H, c, n_sel)
        else:
            own = ((rule.pos_q[s : s + chunk] - rule.first_key + lead) // bs).view(1, 1, c, 1)
            cs = cs.masked_fill(~block_ok | (blk_ids >= own), float("-inf"))
            vals, blocks = cs.topk(n_sel - 1, dim=-1)  # earlier blocks, then the own block
            blocks = torch.cat([blocks, own.expand(b, h, c, 1)], -1)
            vals = torch.cat([vals, vals.new_zeros(*vals.shape[:-1], 1)], -1)
        cand = (blocks.unsqueeze(-1) * bs + offs).reshape(b, h, c, n_sel * bs)  # key ids
        scores = (gather(k_pad, cand) @ qc.unsqueeze(-1)).squeeze(-1)  # (B, H, c, n_sel*bs)
        cand_ok = torch.gather(okc.expand(b, h, c, nb * bs), 3, cand)
        cand_ok &= torch.isfinite(vals).repeat_interleave(bs, -1)  # unselectable blocks
        scores = scores.masked_fill(~cand_ok, float("-inf"))
        top_vals, top_pos = scores.topk(kk, dim=-1)
        idx_parts.append(torch.gather(cand, 3, top_pos))
        val_parts.append(top_vals)
    idx = (torch.cat(idx_parts, 2) - lead).clamp(0, tk - 1)  # padded slots are invalid (-inf) anyway
    return idx, torch.isfinite(torch.cat(val_parts, 2))
