"""The privileged track-following expert drives whole laps in both action spaces."""

import numpy as np
import pytest

from agents.carracing.measures import wheels_off_road

from agents.carracing.env import make_env
from agents.carracing.state import BRAKE_EXCESS, PLAN_AHEAD
from agents.carracing.wheel import STEER_FIRST, WheelDecoder, wheel_action, wheel_after, wheel_steer
from agents.experts import make_expert
from agents.experts.track import ROAD_HALF_WIDTH, TrackExpertConfig, TrackFollowingExpert, racing_line
from agents.driving.rollout import run_episode, summarize
from nac.config import ConfigError
from nac.driving import DrivingNetConfig


class _Actions:
    """Observer: the actions of an episode."""

    def __init__(self):
        self.actions = []

    def before_step(self, env, obs, action):
        self.actions.append(action)

    def after_step(self, *args):
        pass


@pytest.mark.parametrize("continuous", [False, True])
def test_track_expert_finishes_laps(continuous):
    """One lap each (the discrete expert plans: 15-20 ms a step); its planned wheel angle drives seed 301 below."""
    env = make_env(continuous, pixels=False)
    expert = make_expert("track", env)
    assert continuous or expert.config.plan_horizon > 0  # the discrete default plans
    spy = _Actions()
    r = run_episode(env, expert, 300, observer=spy)
    assert r.lap_finished and r.episode_return > 880
    if continuous:
        steer = np.array(spy.actions)[:, 0]
        assert steer.min() < -0.1 and steer.max() > 0.1  # both turns
    else:  # on a left-hand bend it steers left (2) at some point: both turns, mostly gas
        counts = np.bincount(np.array(spy.actions, dtype=int), minlength=5)
        assert counts[1] > 0 and counts[2] > 0 and counts[3] > counts[1]


def test_unknown_expert_and_model_for_track_are_refused():
    env = make_env(False, pixels=False)
    with pytest.raises(ConfigError, match="unknown expert 'human'; choose one of track"):
        make_expert("human", env)
    with pytest.raises(ConfigError, match="needs no model file"):
        make_expert("track", env, model="ppo.zip")


def test_summary_statistics():
    s = summarize([900.0, 910.0, 920.0, 880.0])
    assert s["mean_return"] == pytest.approx(902.5)
    assert s["std_return"] == pytest.approx(np.std([900, 910, 920, 880], ddof=1))
    assert s["ci95_low"] < 902.5 < s["ci95_high"]
    assert s["solved_share"] == 0.75


def _track(seed=300):
    env = make_env(False, pixels=False)
    env.reset(seed=seed)
    track = env.unwrapped.track
    centre = np.array([(t[2], t[3]) for t in track])
    normal = np.array([(np.cos(t[1]), np.sin(t[1])) for t in track])
    return centre, normal


def _bending(p):
    d2 = np.roll(p, 1, axis=0) - 2 * p + np.roll(p, -1, axis=0)
    return float((d2**2).sum())


def test_racing_line_cuts_the_curves_within_the_road():
    centre, normal = _track()
    assert np.array_equal(racing_line(centre, normal, 0.0), centre)
    line = racing_line(centre, normal, 3.0)
    offset = np.einsum("ij,ij->i", line - centre, normal)
    assert np.allclose(line, centre + offset[:, None] * normal)  # moved across the road only
    assert np.abs(offset).max() <= 3.0 + 1e-9 and np.abs(offset).max() > 2.0  # uses the room, never more
    assert _bending(line) < 0.8 * _bending(centre)
    assert _bending(racing_line(centre, normal, 5.0)) < _bending(line)


def test_discrete_steer_pulses_hold_past_the_target_then_release():
    env = make_env(False, pixels=False)
    cfg = TrackExpertConfig(continuous=False, steer_tolerance=0.04, steer_hold=0.08)
    expert = TrackFollowingExpert(env, cfg)
    env.reset(seed=300)
    expert.reset()
    # Target 0.1 rad to the right: wheels at 0.07 are within tolerance, at 0.05 a pulse starts.
    assert expert.steer_pulse(0.1, 0.07) == 3
    assert expert.steer_pulse(0.1, 0.05) == 1
    assert expert.steer_pulse(0.1, 0.12) == 1  # past the target, short of target + hold: still steering
    assert expert.steer_pulse(0.1, 0.17) == 1
    assert expert.steer_pulse(0.1, 0.18) == 3  # target + hold reached: gas, the wheels unwind
    assert expert.steer_pulse(0.1, 0.12) == 3  # no new pulse until they fall short again
    # The same to the left (action 2); a target that changes side ends the pulse at once.
    assert expert.steer_pulse(-0.1, -0.05) == 2
    assert expert.steer_pulse(-0.1, -0.15) == 2
    assert expert.steer_pulse(0.02, -0.15) == 1


def test_a_speed_cap_holds_the_car_below_it():
    from dataclasses import replace

    env = make_env(True, pixels=False)

    def top_speed(cap):
        expert = TrackFollowingExpert(env, replace(TrackExpertConfig.for_action_space(True), max_speed=cap))
        env.reset(seed=300)
        expert.reset()
        speeds = []
        for _ in range(400):
            env.step(expert.select_action())
            speeds.append(float(np.hypot(*env.unwrapped.car.hull.linearVelocity)))
        return max(speeds)

    assert 49.0 < top_speed(50.0) < 52.0 and top_speed(float("inf")) > 80.0  # reaches the cap and holds it
    with pytest.raises(ConfigError, match="max_speed must be > 0"):
        TrackExpertConfig(max_speed=0)


def test_track_expert_config_is_checked():
    with pytest.raises(ConfigError, match="line_room must be in"):
        TrackExpertConfig(line_room=ROAD_HALF_WIDTH)
    with pytest.raises(ConfigError, match="lookahead must be > 0"):
        TrackExpertConfig(lookahead=0)


def test_planning_config_is_checked():
    with pytest.raises(ConfigError, match="plan_horizon must be 0 or >= 3, and 0 for continuous"):
        TrackExpertConfig(continuous=True, plan_horizon=10)
    with pytest.raises(ConfigError, match="plan_horizon must be 0 or >= 3"):
        TrackExpertConfig(plan_horizon=2)  # shorter than the planned wheel angle it reports


def test_the_experts_planned_wheel_angle_drives_as_its_pulses_do():
    """The label a wheel-angle network learns (the angle the planning expert's wheels reach 3
    steps later) and the policy's decoder (agents.carracing.wheel.WheelDecoder, with the wheels followed by
    wheel_after alone): fed the expert's plan, they drive its lap with other pulses than its own."""
    env = make_env(False, pixels=False)
    expert = TrackFollowingExpert(env)

    class Decoded:
        def reset(self):
            expert.reset()
            self.decoder, self.same, self.drift, self.brakes = WheelDecoder(), [], [], []

        def select_action(self, obs):
            a = expert.select_action(obs)
            self.drift.append(abs(self.decoder.wheel - env.unwrapped.car.wheels[0].joint.angle))
            # braking by the expert's rule on its recorded speed excess, not by its action
            d = self.decoder(expert.planned_wheel_angle, expert.speed_excess)
            self.brakes.append(d == 4)
            self.same.append(d == a)
            return d

    driver = Decoded()
    r = run_episode(env, driver, 301)
    assert r.lap_finished and r.episode_return > 900
    assert max(driver.drift) < 0.01  # the modelled wheel is Box2D's
    assert 0.5 < np.mean(driver.same) < 0.95  # the same path by other pulses
    assert 0 < np.mean(driver.brakes) < 0.1  # it brakes, rarely
    assert np.isnan(TrackFollowingExpert(make_env(True, pixels=False)).planned_wheel_angle)  # no planner, no plan


def test_the_wheel_decoder_aims_at_the_angle_asked_for_delay_steps_before():
    """The network's angle is the one planned PLAN_AHEAD steps ahead: the decoder steers towards
    each output `delay` steps later (the first ones aim at the episode's first output)."""
    decoder = WheelDecoder(delay=PLAN_AHEAD)
    assert decoder.delay == PLAN_AHEAD == WheelDecoder().delay
    asked = [0.0] * 5 + [-0.3] * 10
    actions = [decoder(t, -10.0) for t in asked]
    assert actions[:5 + PLAN_AHEAD] == [3] * (5 + PLAN_AHEAD)  # straight on until the right turn asked at step 5 is due
    assert actions[5 + PLAN_AHEAD:5 + PLAN_AHEAD + 5] == [1] * 5  # then right, 0.06 rad a step
    assert decoder.wheel == pytest.approx(-0.3) and decoder.aim == -0.3
    first = WheelDecoder(delay=2)
    assert [first(t, -10.0) for t in (0.2, 0.0, 0.0)] == [2, 2, 2]  # before the delay is up: the first output
    undelayed, wheel = WheelDecoder(delay=0), 0.0
    for t, e in [(0.2, -5.0), (0.2, 1.0), (-0.1, 8.0), (0.0, 8.0)]:  # no delay: wheel_action on the wheels followed
        a = undelayed(t, e)
        assert a == int(wheel_action(t, e, wheel))
        wheel = float(wheel_after(wheel, a))
    decoder.reset()
    assert decoder.wheel == 0.0 and decoder(0.3, -10.0) == 2
    with pytest.raises(ValueError, match="delay must be >= 0"):
        WheelDecoder(delay=-1)


def test_wheel_steer_plans_its_wheels_over_the_angles_asked():
    """One aim: the nearest after one step, as wheel_action chooses. Several: the first action of the sequence whose
    wheels come nearest them all, so that it steers on into an angle that grows where one step would unwind."""
    for wheel in np.linspace(-0.42, 0.42, 15):
        for aim in np.linspace(-0.4, 0.4, 17):
            assert wheel_steer([aim], wheel) == int(wheel_action(aim, -10.0, wheel))
    assert int(wheel_action(0.3, -10.0, 0.3)) == 3  # at the aim: gas (the wheels unwind 0.06, as far as a steer step overshoots)
    assert wheel_steer([0.3, 0.36, 0.42], 0.3) == 2  # the aims ahead grow: left now
    assert wheel_steer([0.3, 0.24, 0.18], 0.3) == 3  # they fall: gas, and the wheels unwind
    assert wheel_steer([-0.3, -0.36, -0.42], -0.3) == 1  # and to the right
    asked = (0.0, 0.0, 0.0, 0.0, 0.1, 0.2, 0.3)  # a turn asked faster than the wheels turn (0.06 a step)
    ahead, now = WheelDecoder(horizon=PLAN_AHEAD + 1), WheelDecoder()  # given the angles due now and 3 steps on / now
    assert [ahead(t, -10.0) for t in asked] == [3] * 6 + [2]  # at step 6 the 0.1, 0.2, 0.3 due next: turn in now
    assert [now(t, -10.0) for t in asked] == [3] * 7  # the angle due at step 6 is 0 (asked at step 3): straight on
    decoder = WheelDecoder(horizon=2)
    assert decoder(0.2, -10.0) == 2 and decoder.aim == 0.2  # before the delay is up, the first output stands in
    with pytest.raises(ValueError, match="horizon must be in"):
        WheelDecoder(delay=2, horizon=4)
    with pytest.raises(ConfigError, match="wheel-horizon must be a whole number in 1..4"):
        DrivingNetConfig(action_space="discrete", wheel_target=True, wheel_horizon=5)
    with pytest.raises(ConfigError, match="wheel_horizon is for wheel-angle networks"):
        DrivingNetConfig(action_space="discrete", wheel_horizon=2)


def test_a_decoder_that_looks_ahead_drives_the_experts_plan_through_a_hairpin():
    """Fed the planning expert's own angles, which drop for a step between its pulses, the one-step decoder unwinds
    its wheels in a 159-degree hairpin (seed 254) and leaves the road (the expert's plan brings it back, too late for the
    lap); looking 4 steps ahead it drives the lap."""
    env = make_env(False, pixels=False)
    expert = TrackFollowingExpert(env)

    class Decoded:
        def __init__(self, horizon):
            self.horizon = horizon

        def reset(self):
            expert.reset()
            self.decoder = WheelDecoder(horizon=self.horizon)

        def select_action(self, obs):
            expert.select_action(obs)
            return self.decoder(expert.planned_wheel_angle, expert.speed_excess)

    one, ahead = run_episode(env, Decoded(1), 254), run_episode(env, Decoded(PLAN_AHEAD + 1), 254)
    assert not one.lap_finished and one.wheels_off > 0.03 and one.episode_return < 895
    assert ahead.lap_finished and ahead.episode_return > 900


def test_the_wheel_decoder_steers_before_it_brakes():
    """A discrete car cannot steer and brake in one step, and braking unwinds its wheels: the
    decoder brakes above the margin only once its wheels are within STEER_FIRST of the target."""
    fast = BRAKE_EXCESS + 5.0
    assert int(wheel_action(0.3, fast, 0.0)) == 2  # far from a left target: steer left, not brake
    assert int(wheel_action(-0.3, fast, 0.0)) == 1  # and right
    assert int(wheel_action(0.3, fast, 0.3 - STEER_FIRST / 2)) == 4  # near it: brake
    assert int(wheel_action(0.0, fast, 0.0)) == 4  # on a straight: brake
    assert int(wheel_action(0.3, BRAKE_EXCESS - 1.0, 0.3)) == 0  # below the margin, in the coast band: coast
    # elementwise over arrays, as training's decoded accuracy uses it
    out = wheel_action(np.array([0.3, 0.3]), np.array([fast, fast]), np.array([0.0, 0.29]))
    assert out.tolist() == [2, 4]


def test_the_discrete_expert_brakes_and_coasts_by_its_speed_excess_alone():
    """The recorded speed excess must say when every brake comes (a wheel-angle network brakes by
    it): with plan_brake off the look-ahead never brakes, the expert brakes exactly where the excess
    is above its margin and coasts (0) only between 0 and the margin, and its top speed holds."""
    env = make_env(False, pixels=False)
    expert = TrackFollowingExpert(env)
    cfg = expert.config
    assert not cfg.plan_brake and cfg.coast and cfg.max_speed == 75.0
    assert all(a != 4 for a, _ in expert.planner.candidates)
    env.reset(seed=302)
    expert.reset()
    actions, excess, speeds = [], [], []
    for _ in range(600):
        a = int(expert.select_action())
        actions.append(a)
        excess.append(expert.speed_excess)
        env.step(a)
        speeds.append(float(np.hypot(*env.unwrapped.car.hull.linearVelocity)))
    actions, excess = np.array(actions), np.array(excess)
    assert (actions == 4).any() and (actions == 0).any()
    assert np.array_equal(actions == 4, excess > cfg.speed_margin)
    assert np.all((excess[actions == 0] > 0) & (excess[actions == 0] <= cfg.speed_margin))
    assert max(speeds) < cfg.max_speed + cfg.speed_margin + 1.0


@pytest.mark.parametrize("continuous", [False, True])
def test_the_expert_brings_a_car_back_from_the_grass(continuous):
    """Handed a car that drove on with gas across the grass beyond a bend, heading away from the road, the expert
    steers it back onto the road and drives on along the track (pure pursuit alone aimed almost straight ahead
    there, and the planner's score drove on across the grass: the car never came back)."""
    env = make_env(continuous, pixels=False)
    expert = TrackFollowingExpert(env)
    env.reset(seed=303)
    expert.reset()
    gas = np.array([0.0, 1.0, 0.0], dtype=np.float32) if continuous else 3
    car = env.unwrapped.car
    # judged by the track's own geometry and the simulator's tile contacts, not by the expert's helpers it steers by
    centre = np.array([(x, y) for _, _, x, y in env.unwrapped.track])

    def nearest() -> int:  # the track point nearest the car's centre
        return int(np.argmin(np.hypot(*(centre - np.array(car.hull.position)).T)))

    def beyond() -> float:  # the car's centre beyond the road's edge (negative: on the road)
        return float(np.hypot(*(centre[nearest()] - np.array(car.hull.position)))) - ROAD_HALF_WIDTH

    for t in range(200):
        expert.select_action()  # follows the car along its line
        env.step(gas)
        if beyond() > 20 - ROAD_HALF_WIDTH:
            break
    assert beyond() > 20 - ROAD_HALF_WIDTH and wheels_off_road(env) == 4, "the car did not leave the road"
    start = nearest()
    back = None
    for t in range(300):
        env.step(expert.select_action())
        if back is None and beyond() < -2 and wheels_off_road(env) == 0:
            back = t
    assert back is not None and back < 200, f"back on the road after {back} steps"
    assert (nearest() - start) % len(centre) > 20  # and on along the track
    assert beyond() < 0 and wheels_off_road(env) == 0
