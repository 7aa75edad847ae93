"""DAgger (Ross et al. 2011): drive with the policy, let the expert label every visited frame,
add the frames to the data and train on.

Round r executes the expert's action with probability beta**r and the policy's otherwise (the
policy sees every frame either way, so its window is never broken); the recorded label is
always the expert's. With a takeover gate (`takeover` > 0, as in SafeDAgger / HG-DAgger: the
expert intervenes where the policy is about to fail) the expert also drives while the car is
more than `takeover` u/s faster than the expert's target speed there, has a wheel off the
road or has stalled (slower than STALL_SPEED after the first STALL_AFTER steps), and for
TAKEOVER_HOLD steps after: with beta 0 the policy drives until it errs, the
rollouts reach the states where it fails (a bend entered too fast) and record the expert's way
out of them, without hundreds of frames of a car lost on the grass. The rollouts go to <run>/dagger, a demonstration set like any other, and
training continues the same run (same validation episodes) with that folder added to its data.
Each round's progress is kept in <run>/dagger.json, so an interrupted DAgger run resumes.

This module holds the DAgger config and the loop of rounds; who drives a rollout step by step is
agents.training.mixing's, the rules between rounds (one more round, the weights a run leaves, the seeds
a round drives) agents.training.rounds'.
"""

from __future__ import annotations

import math
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agents.training.trainers import train
from agents.training.loop import TrainConfig
from agents.training.collect import Recorder, demo_header, save_recording, training_scene
from agents.carracing.env import make_env
from agents.carracing.measures import OffRoadLimit
from agents.evaluation.evaluate import EvaluateConfig
from agents.experts import make_expert
from agents.driving.policy import DrivingPolicy
from agents.carracing import perturb as perturbations
from agents.driving.rollout import parallel_map, run_episode, run_episodes
from datasets.demos import MANIFEST, DemoSet
from nac.checkpoint import read_json, write_json
from nac.config import ConfigError
from agents.training.mixing import BatchMixedDriver, MixedDriver
from agents.training.rounds import (average_rounds, check_weights, clean_mean_return, copy_weights, drives_perturbed, keep_round_weights,
                                    more_rounds, rollout_batches, rollout_perturbation, round_seeds, round_weights, select_round,
                                    wants_check)
from agents.training.dagger_config import DaggerConfig, recipe_beta


def rollout(run: str, expert_name: str, beta: float, out: str, max_steps: int, off_road_steps: int, takeover: float, spec: str | None,
            scene: str, seeds: tuple[int, ...]) -> list[dict[str, Any]]:
    """Policy-driven, expert-labelled episodes written into `out`, one per seed; their manifest entries. On an odd seed the
    policy drives under the perturbation `spec` (None: never), one episode at a time as its frames arrive; the others are
    stepped together, one batched forward a step (each episode the one it would be alone, up to the float rounding of a
    batched forward). The episodes show `scene` (agents.carracing.scenarios), the run's demonstrations' own."""
    torch.set_num_threads(1)
    policy = DrivingPolicy.from_run(run, "best")
    continuous = policy.continuous
    envs = [make_env(continuous, max_steps, scenario=scene) for _ in seeds]
    if off_road_steps:
        envs = [OffRoadLimit(env, off_road_steps) for env in envs]
    try:
        def save(seed: int, rec: Recorder, result: Any, driver: MixedDriver, perturb: str | None) -> dict[str, Any]:
            return save_recording(out, rec.episode(seed, continuous), result, {"beta": beta, "expert_share": driver.expert_steps / max(result.length, 1),
                                                                               "perturb": perturb})

        out_entries: list[dict[str, Any]] = []
        together = [(env, seed) for env, seed in zip(envs, seeds) if not drives_perturbed(spec, seed)]
        for env, seed in zip(envs, seeds):
            if not drives_perturbed(spec, seed):
                continue
            driving = perturbations.PerturbedPolicy(policy, perturbations.parse(spec), continuous, seed=seed)  # type: ignore[arg-type]
            driver = MixedDriver(driving, make_expert(expert_name, env), beta, seed, takeover, env)
            rec = Recorder(label=lambda d=driver: d.label, expert=driver.expert, saw=lambda p=driving: getattr(p, "saw", True))
            out_entries.append(save(seed, rec, run_episode(env, driver, seed, observer=rec), driver, spec))
        if together:
            mixes = [MixedDriver(policy, make_expert(expert_name, env), beta, seed, takeover, env) for env, seed in together]
            batch = BatchMixedDriver(policy, mixes)
            recs = [Recorder(label=lambda d=mix: d.label, expert=mix.expert, saw=lambda: True) for mix in mixes]
            results = run_episodes([env for env, _ in together], batch, [seed for _, seed in together], observers=batch.observers(recs))
            out_entries += [save(seed, rec, result, mix, None) for (_, seed), mix, rec, result in zip(together, mixes, recs, results)]
        return sorted(out_entries, key=lambda e: e["seed"])
    finally:
        for env in envs:
            env.close()


def dagger(cfg: DaggerConfig, quiet: bool = False) -> dict[str, Any]:
    run = Path(cfg.run)
    config_path = run / "config.json"
    if not config_path.is_file():
        raise ConfigError(f"{run} is not a training run (no config.json); train one with 'nacdrive train'")
    saved = read_json(config_path)
    if saved.get("task") != "carracing" or "train" not in saved:
        raise ConfigError(f"{run} is not a CarRacing training run")
    if not (run / "train_state.json").is_file():
        raise ConfigError(f"{run} has no training state to continue from; finish 'nacdrive train' first")
    continuous = saved["net"]["action_space"] == "continuous"
    data_dir = run / "dagger"
    state_path = run / "dagger.json"
    state = read_json(state_path) if state_path.is_file() else {"rounds": []}
    # the rollouts show what the run's demonstrations showed
    scene = training_scene([d for d in TrainConfig.from_dict(saved["train"]).moved_to(run).data if Path(d) != data_dir])
    if not (data_dir / MANIFEST).is_file():  # new, or killed before its manifest was whole
        DemoSet.create(data_dir, {**demo_header(cfg.expert, continuous, cfg.max_steps, scene=scene), "driver": "policy with DAgger beta mixing",
                                  "planned_seeds": []})
    demos = DemoSet(data_dir)
    demos.recover()
    rounds_done = len([r for r in state["rounds"] if r.get("trained")])
    spec = rollout_perturbation(cfg.perturb, TrainConfig.from_dict(saved["train"]).stride_jitter or 1)
    base = recipe_beta(saved["net"]["head"], continuous) if cfg.beta is None else cfg.beta
    r = rounds_done
    if not rounds_done:
        keep_round_weights(run, 0)  # behaviour cloning's weights, before any round
    elif "average" in state or "selected" in state:
        # best holds the mean or the round this function left: the last round's own weights drive its check and the next rounds,
        # as they did in a run that went on without a stop (a run without either keeps its best as it is, however it was trained since)
        copy_weights(round_weights(run, rounds_done), run / "best.safetensors")
    while True:
        if wants_check(cfg, state["rounds"], r, demos.episodes):
            state["rounds"][r - 1]["check"] = check_weights(cfg, run)
            write_json(state_path, state)
        if not more_rounds(cfg, state["rounds"], r, demos.episodes):
            break
        r += 1
        beta = base**r
        seeds = round_seeds(cfg, r)
        if len(state["rounds"]) < r:
            state["rounds"].append({"round": r, "beta": beta, "seeds": seeds, "perturb": spec, "trained": False,
                                    **({"extra": True} if r > cfg.rounds else {})})
            write_json(state_path, state)
        todo = [s for s in seeds if s not in set(demos.seeds())]
        if todo:
            tasks = rollout_batches(todo, spec, EvaluateConfig.batch)
            parallel_map(
                partial(rollout, str(run), cfg.expert, beta, str(data_dir), cfg.max_steps, cfg.off_road_steps, cfg.takeover, spec, scene),
                tasks,
                cfg.executor(shared=(str(run),)),
                desc=f"DAgger round {r} rollouts (beta {beta:.2f})",
                on_result=lambda entries: [demos.add(e) for e in entries],
                postfix=lambda done: {"mean return": f"{np.mean([e['return'] for entries in done for e in entries]):.1f}"},
                counts=[len(t) for t in tasks],
            )
        done = [e for e in demos.episodes if e["seed"] in set(seeds)]
        returns = [e["return"] for e in done]
        # continue the same run on the data plus the rollouts, for `epochs` (or `minutes`) more
        train_state = read_json(run / "train_state.json")
        tc = TrainConfig.from_dict(saved["train"])
        if "target" not in state["rounds"][r - 1]:
            target = {
                "epochs": train_state["epoch"] + cfg.epochs,
                "minutes": (train_state["seconds"] / 60 + cfg.minutes) if cfg.minutes is not None else None,
            }
            state["rounds"][r - 1]["target"] = target
            write_json(state_path, state)
        target = state["rounds"][r - 1]["target"]
        # training goes on in the run folder given, wherever it was trained (TrainConfig.moved_to), on its rollouts too
        tc = tc.moved_to(run)
        data = tc.data + ([str(data_dir)] if str(data_dir) not in tc.data else [])
        tc = TrainConfig.from_dict({**asdict(tc), "data": data, "epochs": target["epochs"] or 10**9, "minutes": target["minutes"]})
        saved["train"] = asdict(tc)
        write_json(config_path, saved)
        # best weights from this round's training on (the validation episodes are expert-driven,
        # so the pre-round weights would often stay "best" and the round would change nothing)
        first_time = not state["rounds"][r - 1].get("best_restarted")
        state["rounds"][r - 1]["best_restarted"] = True
        write_json(state_path, state)
        metrics = train(tc, resume=True, quiet=quiet, restart_best=first_time)
        keep_round_weights(run, r)
        state["rounds"][r - 1].update(trained=True, rollout_mean_return=float(np.mean(returns)), best=metrics.get("best"),
                                      expert_share=float(np.mean([e.get("expert_share", math.nan) for e in done])))
        state["rounds"][r - 1]["clean_mean_return"] = clean_mean_return(done, seeds)
        perturbed = [e["return"] for e in done if e.get("perturb")]
        if perturbed:  # the rollouts driven under the perturbation, apart
            state["rounds"][r - 1]["perturbed_mean_return"] = float(np.mean(perturbed))
        write_json(state_path, state)
        saved = read_json(config_path)
    if cfg.select != "last":
        select_round(cfg, run, state, r)
    elif state.pop("selected", None) is not None:
        state.pop("selected_by", None)
        write_json(state_path, state)
    if cfg.average > 1 and r >= 3:
        state["average"] = list(range(max(2, r - cfg.average + 1), r + 1))
        write_json(state_path, state)  # first: a job stopped before the mean is written restores the round's own weights anyway
        average_rounds(run, state["average"])
    elif state.pop("average", None) is not None:
        write_json(state_path, state)
    return state
