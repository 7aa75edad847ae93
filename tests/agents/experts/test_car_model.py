"""The planner's model of the car follows Box2D's car; its batched rollouts are each candidate's own."""

import numpy as np

from agents.carracing.env import make_env
from agents.experts import car_model
from agents.experts.track import TrackFollowingExpert


def _expert_episode(seed: int, steps: int):
    env = make_env(False, pixels=False)
    expert = TrackFollowingExpert(env)
    env.reset(seed=seed)
    expert.reset()
    for _ in range(steps):
        env.step(expert.select_action())
    return env, expert


def test_the_model_follows_box2ds_car_over_a_rollout():
    """From states of an expert episode, the model driven with the environment's own actions (the
    expert's, then random pulses, the grip of the real wheels' tiles) stays within millimetres of
    the car Box2D moves, for 40 steps each, on the road and off it."""
    env, expert = _expert_episode(301, 60)
    real = env.unwrapped.car
    consts = car_model.car_constants(real)
    rng = np.random.default_rng(0)
    gaps, speed_gaps, off_road = [], [], 0
    for window in range(8):
        s = car_model.car_state(real, consts)
        for t in range(40):
            a = int(expert.select_action()) if window % 2 == 0 else int(rng.choice(5, p=[0.1, 0.25, 0.25, 0.3, 0.1]))
            on_road = np.array([bool(w.tiles) for w in real.wheels])
            off_road += not on_road.all()
            car_model.model_step(s, a, on_road, consts, car_model.WHEEL_ANCHORS)
            env.step(a)
        x, y, vx, vy = car_model.hull_pose(s, consts)
        gaps.append(np.hypot(x - real.hull.position[0], y - real.hull.position[1]))
        speed_gaps.append(abs(np.hypot(vx, vy) - np.hypot(*real.hull.linearVelocity)))
        assert abs(s[car_model.JOINT] - real.wheels[0].joint.angle) < 1e-3
    assert off_road > 0  # the random windows took wheels onto the grass
    assert np.median(gaps) < 0.01 and max(gaps) < 0.2, gaps
    assert max(speed_gaps) < 0.1, speed_gaps


def test_batched_rollouts_are_each_candidates_own_rollout():
    """Rolling out every candidate in one call gives each the score and planned wheel angle it gets
    rolled out alone: the candidates do not share state."""
    env, expert = _expert_episode(300, 100)
    planner, real = expert.planner, env.unwrapped.car
    consts = car_model.car_constants(real)
    start = car_model.car_state(real, consts)
    cands = np.array([(3, 1), (1, 1), (2, 1), (4, 1), (3, 3), (3, 6), (1, 4)], dtype=np.int64)
    args = (consts, car_model.WHEEL_ANCHORS, *planner.line, planner.centre, planner.normal, planner.cfg)
    tail = (expert.line_index, expert.pulse, 40, 3, planner.weights)
    scores, ahead, lost = car_model.rollouts(start, *args, cands, *tail)
    for k, cand in enumerate(cands):
        one, one_ahead, one_lost = car_model.rollouts(start, *args, cand[None], *tail)
        assert one[0] == scores[k] and one_ahead[0] == ahead[k] and one_lost[0] == lost[k]
    assert np.array_equal(start, car_model.car_state(real, consts))  # the start state is not touched
    assert len(set(scores.tolist())) > 3  # the candidates drive differently
    assert 20 < scores.max() < 80  # 40 steps at 25-75 u/s gain 20-60 units along the line, plus 0.3 s of speed


def test_the_planned_wheel_angle_is_where_the_wheels_are_three_steps_later():
    """The expert records the wheel angle its chosen rollout reaches PLAN_AHEAD steps on: driving
    on, the real wheels reach it (the model's joint is the motor's exact arithmetic)."""
    env, expert = _expert_episode(302, 50)
    misses = []
    for _ in range(50):
        env.step(int(expert.select_action()))
        planned = expert.planned_wheel_angle
        for _ in range(2):  # the expert drives on, mostly as planned
            env.step(int(expert.select_action()))
        misses.append(abs(env.unwrapped.car.wheels[0].joint.angle - planned))
    assert np.median(misses) < 0.05


def test_the_compiled_rule_is_the_experts_rule():
    """car_model.base_action is TrackFollowingExpert.base_action rewritten for the compiled rollouts:
    on the states of an expert episode, read into the model, it takes the expert's action, line
    index and pulse (on all but a step or two, where the model's hull velocity, derived from the
    rigid car, puts a speed within a hair of a threshold)."""
    env, expert = _expert_episode(303, 0)
    real, planner = env.unwrapped.car, expert.planner
    consts = car_model.car_constants(real)
    same = steps = 0
    for _ in range(400):
        idx, pulse = expert.line_index, expert.pulse
        compiled = car_model.base_action(car_model.car_state(real, consts), consts, *planner.line, planner.centre, planner.normal,
                                          planner.cfg, idx, pulse)
        ours = (int(expert.base_action(real)), expert.line_index, expert.pulse)
        expert.line_index, expert.pulse = idx, pulse
        same += tuple(int(v) for v in compiled) == ours
        steps += 1
        env.step(int(expert.select_action()))
    assert same >= steps - 2, f"{same} of {steps}"


def test_the_compiled_rule_is_the_experts_rule_off_the_road():
    """The same off the road, where both steer back: on the states of a car that drove on with gas across the
    grass beyond a bend (the hull's centre beyond the road's edge on most of them)."""
    env, expert = _expert_episode(303, 0)
    real, planner = env.unwrapped.car, expert.planner
    consts = car_model.car_constants(real)
    same = off = 0
    for _ in range(200):
        expert.base_action(real)  # its line index, following the car
        idx = expert.line_index
        off += expert.beyond_edge(idx, *real.hull.position) > 0
        compiled = car_model.base_action(car_model.car_state(real, consts), consts, *planner.line, planner.centre, planner.normal,
                                          planner.cfg, idx, 0)
        expert.line_index, expert.pulse = idx, 0
        same += tuple(int(v) for v in compiled) == (int(expert.base_action(real)), expert.line_index, expert.pulse)
        expert.line_index = idx
        env.step(3)
    assert off >= 60 and same >= 198, f"{off} steps off the road; the same action on {same} of 200"
