"""The NAC logit ODE and its three solutions (NAC.md section 2).

    d a / dt = -omega_tau * a + phi,   a(0) = 0                                 (Eq. 1)

exact:  a(t) = phi / omega_tau * (1 - exp(-omega_tau * t))                       (Eq. 3/17)
euler:  a <- a + h * (-omega_tau * a + phi), n steps of size h                  (Eq. 2)
        with n large enough that h * omega_tau <= 1 (the condition of the paper's Theorem 1),
        so that 0 <= a <= phi * t, as for exact
steady: a = phi / omega_tau                                                      (Eq. 18)
"""

from __future__ import annotations

from typing import Literal

import torch

Mode = Literal["exact", "euler", "steady"]
MODES: tuple[str, ...] = ("exact", "euler", "steady")


def solve(
    phi: torch.Tensor,
    omega_tau: torch.Tensor,
    t: torch.Tensor | float,
    mode: str = "exact",
    euler_steps: int = 6,
    euler_step_size: torch.Tensor | float | None = None,
) -> torch.Tensor:
    """State of Eq. 1 at horizon `t` (all arguments broadcast together).

    In `euler` mode the horizon is `euler_steps * euler_step_size` when a step size is given (the
    authors' fixed-step scheme), else `t` (the same horizon as `exact`). It is covered in
    n = max(euler_steps, ceil(horizon * omega_tau)) equal steps, per pair: omega_tau is unbounded
    (softplus), and a step with h * omega_tau > 1 overshoots the fixed point (a < 0 or a > phi * t;
    unstable beyond 2). n steps of Euler from a = 0 have the closed form
    a_n = phi / omega_tau * (1 - (1 - h * omega_tau) ** n), used here (as -expm1(n log1p(-h omega_tau)),
    exact in float32 for small steps too) so that every pair takes its own number of steps in one
    vectorised expression.
    """
    if mode == "steady":
        return phi / omega_tau
    if mode == "exact":
        return phi / omega_tau * (-torch.expm1(-omega_tau * t))  # expm1: accurate for small w*t
    if mode == "euler":
        horizon = t if euler_step_size is None else euler_steps * euler_step_size
        horizon = torch.as_tensor(horizon, dtype=omega_tau.dtype, device=omega_tau.device)
        n = torch.clamp(torch.ceil((horizon * omega_tau).detach()), min=euler_steps)  # steps: no gradient
        x = (horizon / n * omega_tau).clamp(max=1 - 1e-6)  # h * omega_tau in [0, 1): the gradient stays finite
        return phi / omega_tau * -torch.expm1(n * torch.log1p(-x))  # 1 - (1 - x)^n, accurate for small x
    raise ValueError(f"mode must be one of {', '.join(MODES)} (got {mode!r})")
