"""The ODE solutions against properties that follow from the maths (NAC.md section 2)."""

import torch

from nac import solve


def _gates(n: int = 500, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    phi = torch.rand(n, generator=g, dtype=torch.float64)
    omega = torch.rand(n, generator=g, dtype=torch.float64) * 3 + 1e-3
    t = torch.rand(n, generator=g, dtype=torch.float64) * 2
    return phi, omega, t


def test_euler_with_many_small_steps_matches_exact_at_the_same_horizon():
    phi, omega, t = _gates()
    exact = solve(phi, omega, t, "exact")
    coarse = solve(phi, omega, t, "euler", euler_steps=5)
    fine = solve(phi, omega, t, "euler", euler_steps=4000)
    assert (fine - exact).abs().max() < 1e-3
    assert (fine - exact).abs().max() < (coarse - exact).abs().max() / 50  # first-order convergence


def test_euler_with_a_fixed_step_size_reaches_horizon_steps_times_step():
    phi, omega, _ = _gates()
    fixed = solve(phi, omega, None, "euler", euler_steps=2000, euler_step_size=0.001)
    assert (fixed - solve(phi, omega, torch.tensor(2.0, dtype=torch.float64), "exact")).abs().max() < 2e-3


def test_exact_tends_to_steady_as_t_grows():
    phi, omega, _ = _gates()
    steady = solve(phi, omega, None, "steady")
    gaps = [(solve(phi, omega, torch.full_like(phi, t), "exact") - steady).abs().max().item() for t in (1, 10, 1e4)]
    assert gaps[0] > gaps[1] > gaps[2]
    assert gaps[2] < 1e-6


def test_exact_state_stays_within_zero_and_phi_over_omega_without_overshoot():
    phi, omega, _ = _gates(2000)
    bound = phi / omega
    ts = torch.linspace(0, 50, 200, dtype=torch.float64)
    states = torch.stack([solve(phi, omega, torch.full_like(phi, t.item()), "exact") for t in ts])
    assert (states >= 0).all() and (states <= bound * (1 + 1e-12)).all()
    assert (states.diff(dim=0) >= -1e-15).all()  # monotone towards the equilibrium


def test_euler_is_unstable_beyond_step_times_omega_of_two():
    phi, omega = torch.tensor([0.5], dtype=torch.float64), torch.tensor([1.0], dtype=torch.float64)
    stable = solve(phi, omega, None, "euler", euler_steps=200, euler_step_size=1.9)
    unstable = solve(phi, omega, None, "euler", euler_steps=200, euler_step_size=2.1)
    assert abs(stable.item() - 0.5) < 1e-2
    assert abs(unstable.item()) > 1e3
