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


def _euler_loop(phi, omega, h, n):
    a = torch.zeros_like(phi)
    for _ in range(n):
        a = a + h * (phi - omega * a)
    return a


def test_euler_is_the_step_by_step_loop_where_the_steps_are_small_enough():
    phi, omega, t = _gates()
    omega = omega.clamp(max=2.5)  # t <= 2, 6 steps: h * omega <= 2 * 2.5 / 6 < 1, so the default 6 steps are kept
    assert torch.allclose(solve(phi, omega, t, "euler", euler_steps=6), _euler_loop(phi, omega, t / 6, 6), atol=1e-12)


def test_euler_takes_more_steps_where_omega_tau_would_overshoot():
    # the default step t/6 with omega_tau 15 and t 1 gives h * omega = 2.5: the plain loop leaves [0, phi t]
    phi, omega, t = torch.tensor([0.8], dtype=torch.float64), torch.tensor([15.0], dtype=torch.float64), torch.tensor([1.0], dtype=torch.float64)
    assert _euler_loop(phi, omega, t / 6, 6).item() < 0  # what the fixed six steps would give
    a = solve(phi, omega, t, "euler", euler_steps=6)
    assert torch.allclose(a, _euler_loop(phi, omega, t / 15, 15), atol=1e-12)  # 15 steps of 1/15
    assert 0 <= a.item() <= (phi * t).item()


def test_euler_stays_within_zero_and_phi_t_for_any_omega_tau():
    g = torch.Generator().manual_seed(3)
    phi = torch.rand(5000, generator=g, dtype=torch.float64)
    omega = torch.exp(torch.rand(5000, generator=g, dtype=torch.float64) * 12 - 4)  # 0.02 .. 3000
    t = torch.rand(5000, generator=g, dtype=torch.float64)
    for a, horizon in ((solve(phi, omega, t, "euler"), t), (solve(phi, omega, None, "euler", euler_steps=6, euler_step_size=0.5), 3.0)):
        assert (a >= 0).all() and (a <= phi * horizon * (1 + 1e-12)).all() and (a <= phi / omega * (1 + 1e-12)).all()
