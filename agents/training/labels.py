"""What a CarRacing network learns from each demonstration step: its action classes and class weights, the targets of
wheel-angle and rate networks, and the loss of a batch."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from agents.carracing.state import STATE_FIELDS
from agents.carracing.wheel import WHEEL_LIMIT, WHEEL_RATE, wheel_action
from datasets.demos import DataError
from datasets.windows import FrameStore
from nac.driving import DrivingNet, DrivingNetConfig


CLASSES = ("noop", "right", "left", "gas", "brake")  # what a step does, in either action space
BRAKE_ON = 0.1  # a continuous brake above this counts as braking (the action classes and the brake gate)


# ---------------------------------------------------------------------- data
def action_classes(actions: np.ndarray | Tensor) -> np.ndarray | Tensor:
    """(N,) class index into CLASSES of each action: the discrete action itself, or what a
    continuous (steer, gas, brake) does most (brake over steering over gas). A numpy array gives
    a numpy array; a tensor a tensor on its device (training's accuracy reads nothing back)."""
    tensor = isinstance(actions, Tensor)
    if actions.ndim == 1:
        return actions.long() if tensor else actions.astype(np.int64)
    where = torch.where if tensor else np.where
    steer, gas, brake = actions[:, 0], actions[:, 1], actions[:, 2]
    # CarRacing: negative steer turns left
    cls = where(brake > BRAKE_ON, 4, where(steer > 0.1, 1, where(steer < -0.1, 2, where(gas > 0.1, 3, 0))))
    return cls if tensor else cls.astype(np.int64)


def labels(store: FrameStore, rows: np.ndarray, targets: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """What the loss compares the rows' outputs with: the expert's actions, their classes, and
    the network's further targets (net_targets)."""
    actions = store.actions[rows]  # (n,) or (n, 3)
    return {"actions": actions, "classes": action_classes(actions), **{name: t[rows] for name, t in targets.items()}}


PLAN = STATE_FIELDS.index("plan_wheel_angle")
EXCESS = STATE_FIELDS.index("speed_excess")
WHEEL = STATE_FIELDS.index("wheel_angle")
SPEED = STATE_FIELDS.index("speed")
SAW = STATE_FIELDS.index("policy_saw")


def net_targets(net: DrivingNet, store: FrameStore) -> dict[str, np.ndarray]:
    """Per-row targets, beyond the actions, of the network's outputs: the action rates (rate_window,
    (N, A)); or the wheel angle the expert planned, the one the car had, the car's speed and its
    speed above the expert's target speed, clipped to +-excess_scale in its units (wheel_target,
    (N,) each)."""
    if net.config.rate_window:
        return {"rates": store.action_rates(net.config.rate_window, net.config.outputs)}
    if not net.config.wheel_target:
        return {}
    cols = [store.state[:, c] if store.state.shape[1] > c else np.full(len(store), np.nan, np.float32) for c in (PLAN, EXCESS)]
    missing = np.isnan(cols[0]) | np.isnan(cols[1])
    if missing.any():
        seed = store.seeds[int(store.episode_of[int(missing.argmax())])]
        raise DataError(
            f"a wheel-angle network learns the angle the expert plans and its speed above the expert's target, but "
            f"{int(missing.sum())} of {len(store)} steps have none (first in the episode of seed {seed}): only the discrete "
            "track expert records both (nacdrive collect --expert track --discrete), in demonstrations and DAgger "
            "rollouts recorded since it does; record them again"
        )
    if net.config.wheel_speed == "target":
        target = store.state[:, SPEED] - cols[1]  # the expert's target speed, from which it took the excess
        lo, hi = net.config.target_speeds
        if target.min() < lo - 1e-3 or target.max() > hi + 1e-3:
            raise DataError(f"the expert's target speeds in these demonstrations span {target.min():.1f}..{target.max():.1f} u/s, "
                            f"outside the network's target_speeds {lo:g}..{hi:g}: give net.target_speeds the expert's own bounds")
    excess = np.clip(cols[1] / net.config.excess_scale, -1.0, 1.0).astype(np.float32)
    return {"wheel_plan": cols[0], "wheel_now": store.state[:, WHEEL], "speed_now": store.state[:, SPEED], "speed_excess": excess}


TURN_SPAN = 10  # steps either side over which turn_rates measures the planned angle's change


def turn_rates(store: FrameStore) -> np.ndarray:
    """(N,) how fast the expert's planned wheel angle turns at each step, in units of the wheel's top
    rate (WHEEL_RATE): |plan(t + 10) - plan(t - 10)| / 20 steps, within an episode (cut short at its
    ends). Over +-10 steps the plan's pulse-by-pulse steps of 0.06 rad average out: 0 on a straight
    or a steady bend, about 0.35 where a left bend turns straight into a right one (0.66 rad in 30
    steps), the top 0.3 % of the quick start's discrete demonstrations."""
    plan = store.state[:, PLAN].astype(np.float64)
    out = np.zeros(len(store), np.float32)
    for first, n in zip(store.starts, store.lengths):
        t = np.arange(n)
        hi, lo = np.minimum(t + TURN_SPAN, n - 1), np.maximum(t - TURN_SPAN, 0)
        p = plan[first : first + n]
        out[first : first + n] = np.abs(p[hi] - p[lo]) / np.maximum(hi - lo, 1) / WHEEL_RATE
    return out


def loss_classes(net: DrivingNetConfig, actions: np.ndarray) -> np.ndarray:
    """(N,) the classes that --balance evens out: the action classes, or for a wheel-angle network
    whether the expert brakes (0 / 1; its speed-excess error is weighted by them)."""
    classes = action_classes(actions)
    return (classes == 4).astype(np.int64) if net.wheel_target else classes


def class_weights(classes: np.ndarray) -> np.ndarray:
    """Inverse-frequency weights over CLASSES, normalized to a mean of 1 over the rows; classes
    never seen get weight 0."""
    counts = np.bincount(classes, minlength=len(CLASSES)).astype(np.float64)
    w = np.where(counts > 0, counts.sum() / np.maximum(counts, 1) / max(1, (counts > 0).sum()), 0.0)
    return w


# ---------------------------------------------------------------------- loss and metrics
def loss_terms(net: DrivingNet, raw: Tensor, batch: dict[str, Tensor], weights: Tensor | None, loss: str = "mse") -> tuple[Tensor, Tensor]:
    """Per-row loss (n,) and per-row correct-class flag (n,). Continuous actions: squared error
    ("mse", the conditional mean) or absolute error ("l1", the conditional median: an action that
    is mostly 0 with rare pulses, as the expert's brake is, then stays 0 where the mean would be a
    small constant brake)."""
    if net.config.wheel_target:
        # the planned angle (in units of the joint's range) and the speed excess (in units of excess_scale), both by
        # squared error; a row is correct when the action decoded at the recorded wheel angle is the expert's (the
        # row's own angle decoded: at drive time agents.carracing.wheel.WheelDecoder aims at the angle asked for WHEEL_DELAY steps
        # before, which a row alone does not hold, so this accuracy is a diagnostic of the outputs, not of the driving)
        labels = batch["actions"].long()
        angle = WHEEL_LIMIT * torch.tanh(raw[:, 0].float())
        label = batch["speed_excess"].float()
        excess = net.config.speed_excess(raw[:, 1].float(), batch["speed_now"].float())  # u/s
        if net.config.wheel_speed == "excess":
            speed_se = (raw[:, 1].float() - label) ** 2
        else:  # the excess the target implies at the recorded speed, its error censored as the label is clipped (at
            # -1, far below the target, any excess below -1 is right): the excess's error where it decides, as "excess"
            pred = excess / net.config.excess_scale
            speed_se = torch.where(label <= -1.0, F.relu(pred + 1.0), torch.where(label >= 1.0, F.relu(1.0 - pred), pred - label)) ** 2
        if weights is not None:  # balanced: weights over (no brake, brake), see loss_classes; the angle is not reweighted
            speed_se = speed_se * weights[(labels == 4).long()]
        angle_se = ((angle - batch["wheel_plan"].float()) / WHEEL_LIMIT) ** 2
        if "angle_weight" in batch:  # train --turn-weight: where the plan turns fast (training only; validation is unweighted)
            angle_se = angle_se * batch["angle_weight"]
        per_row = angle_se + speed_se
        return per_row, wheel_action(angle.detach(), excess.detach(), batch["wheel_now"]) == labels
    if net.config.action_space == "discrete":
        labels = batch["actions"].long()
        # a network trained on action rates: cross-entropy against the rates (soft targets)
        per_row = F.cross_entropy(raw.float(), batch.get("rates", labels), reduction="none")
        correct = raw.argmax(-1) == labels
    elif net.config.brake_gate:
        # whether to brake: cross-entropy on (expert brake > BRAKE_ON); how hard: the error of the
        # brake output on the rows where the expert brakes; steer and gas as without the gate
        raw = raw.float()
        target = batch["actions"].float()
        on = (target[:, 2] > BRAKE_ON).float()
        err = net.squash(raw, driven=False) - target
        err = torch.cat([err[:, :2], err[:, 2:3] * on[:, None]], -1)
        per_row = (err**2 if loss == "mse" else err.abs()).mean(-1) + F.binary_cross_entropy_with_logits(raw[:, 3], on, reduction="none")
    else:
        err = net.squash(raw.float(), driven=False) - batch["actions"].float()
        per_row = (err**2 if loss == "mse" else err.abs()).mean(-1)
    if net.config.action_space == "continuous":
        pred = net.squash(raw.float())
        correct = action_classes(pred.detach()) == batch["classes"]
    if weights is not None:
        per_row = per_row * weights[batch["classes"]]
    return per_row, correct
