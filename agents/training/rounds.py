"""DAgger's rounds: when a run needs one more, the weights each round leaves (kept, averaged over rounds or chosen by
their check), the seeds a round drives, and the lines that report them."""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import save_file

from agents.carracing.env import EPISODE_STEPS
from agents.carracing.seeds import CHECK_SEED, SELECT_SEED
from agents.carracing.measures import seeds_with_bend
from agents.evaluation.evaluate import EvaluateConfig, evaluate
from agents.carracing import perturb as perturbations
from nac.checkpoint import read_weights, replace_file, write_json
from agents.training.dagger_config import DaggerConfig


LOST_TILES = 0.95  # a check episode that reached fewer of its track's tiles than this lost the track (off the road for
# good, turned round, stalled): a policy that drives every bend ends its lap within 1000 steps or, on the longest tracks, a
# few tiles short of it, and a lap lost to one skipped tile still reaches 99 %


def more_rounds(cfg: DaggerConfig, rounds: list[dict[str, Any]], done: int, episodes: list[dict[str, Any]]) -> bool:
    """Whether a round follows the `done` trained ones (`episodes`: the run's rollouts): one begun (its rollouts, maybe interrupted) is
    finished; then up to cfg.rounds; then while the last round falls short (falls_short), up to cfg.max_rounds."""
    if done < len(rounds) or done < cfg.rounds:
        return True
    return bool(cfg.until) and done < cfg.max_rounds and falls_short(cfg, rounds[-1], episodes)


def wants_check(cfg: DaggerConfig, rounds: list[dict[str, Any]], done: int, episodes: list[dict[str, Any]]) -> bool:
    """Whether the last trained round's weights are to be checked now: more_rounds will judge them, their round's rollouts do not
    call for another round already, and they were not checked yet (a check stored before checks kept each episode's tiles is
    driven again)."""
    return (bool(cfg.until and cfg.check) and done == len(rounds) and cfg.rounds <= done < cfg.max_rounds
            and not checked(cfg, rounds[-1].get("check", {})) and not rollouts_short(cfg, rounds[-1], episodes))


def checked(cfg: DaggerConfig, check: dict[str, Any]) -> bool:
    """Whether a stored check holds what the rules judge: each episode's tiles (and, with skips, its skipped tiles; a check
    stored without them is driven again)."""
    return "tiles" in check and (not cfg.skips or "skipped" in check)


def rollouts_short(cfg: DaggerConfig, last: dict[str, Any], episodes: list[dict[str, Any]]) -> bool:
    """The mean of the round's clean rollouts below cfg.until (not those driven under `perturb`: they are there for data from
    where late frames lead, and crash by design). NaN, none clean, is not short."""
    return clean_mean_return(episodes, last["seeds"]) < cfg.until


def falls_short(cfg: DaggerConfig, last: dict[str, Any], episodes: list[dict[str, Any]]) -> bool:
    """Whether the round calls for another: its clean rollouts short (rollouts_short), or with a check, its trained weights' mean
    return there below cfg.until or a check episode that lost its track (reached fewer than LOST_TILES of its tiles), or with
    cfg.skips one that skipped a tile. Both are looked at because each has missed a weak draw the other saw
    (docs/studies/discrete-heads/README.md, 'Lost tracks, not slow laps')."""
    if rollouts_short(cfg, last, episodes):
        return True
    check = last.get("check") if cfg.check else None
    return check is not None and (check["mean_return"] < cfg.until or min(check["tiles"]) < LOST_TILES
                                  or (cfg.skips and max(check["skipped"]) > 0))


def round_weights(run: Path, r: int) -> Path:
    """Where round r's own best weights are kept (0: behaviour cloning's)."""
    return run / "rounds" / f"r{r}.safetensors"


def copy_weights(src: Path, dst: Path) -> None:
    """Copy a weights file atomically (a temporary file, then rename), as checkpoints are written."""
    dst.parent.mkdir(exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.tmp")
    shutil.copyfile(src, tmp)
    replace_file(tmp, dst, dst.name)


def keep_round_weights(run: Path, r: int) -> None:
    """Keep a copy of the run's best weights as they stand after round r (0: behaviour cloning) in <run>/rounds/r<r>.safetensors,
    once: later rounds overwrite best.safetensors, and each round's weights are what a run stopped there would have driven."""
    if not round_weights(run, r).is_file() and (run / "best.safetensors").is_file():
        copy_weights(run / "best.safetensors", round_weights(run, r))


def average_rounds(run: Path, rounds: list[int]) -> None:
    """best.safetensors := the mean of these rounds' kept weights (the wirings' masks are float tensors, the same in every round,
    so their mean is themselves; integer tensors, which these networks have none of, are kept as the first round's). By hand:
    torch.optim.swa_utils averages a model's weights as training goes, not files."""
    states = [read_weights(round_weights(run, k)) for k in rounds]
    mean = {key: torch.stack([s[key].double() for s in states]).mean(0).to(v.dtype) if v.is_floating_point() else v
            for key, v in states[0].items()}
    tmp = run / ".best.safetensors.tmp"
    save_file(mean, str(tmp))
    replace_file(tmp, run / "best.safetensors", "averaged best.safetensors")


def select_round(cfg: DaggerConfig, run: Path, state: dict[str, Any], last: int) -> None:
    """best.safetensors := the kept weights of the candidate round that drove best (their mean return; a later round wins a
    tie), by cfg.select: check, rounds 0..last on cfg.check check tracks (round 0's stored as bc_check, each round's as its
    check); drive, the recipe's last planned round and the extra ones on cfg.select_episodes selection tracks (stored as each
    round's selection; without extra rounds nothing is driven and the last round's weights stay). A round driven already
    (by `until`'s check, or an earlier call) is not driven again; each drive is stored as it finishes, so a stop loses at
    most one."""
    if cfg.select == "check":
        first, name, episodes, seed_start = 0, "check", cfg.check, CHECK_SEED
    else:
        first, name, episodes, seed_start = cfg.rounds, "selection", cfg.select_episodes, SELECT_SEED
    if last <= first:  # one candidate: it stays, undriven
        if state.pop("selected", None) is not None:
            state.pop("selected_by", None)
            write_json(run / "dagger.json", state)
        return
    scores = {}
    for k in range(first, last + 1):
        holder, key = (state["rounds"][k - 1], name) if k else (state, "bc_check")
        if checked(cfg, holder.get(key, {})) if name == "check" else len(holder.get(key, {}).get("seeds", [])) == episodes:
            scores[k] = holder[key]["mean_return"]
            continue
        copy_weights(round_weights(run, k), run / "best.safetensors")  # the drive takes the run's best weights
        holder[key] = drive_weights(run, episodes, seed_start, workers=cfg.workers, ray=cfg.ray, max_steps=cfg.max_steps)
        write_json(run / "dagger.json", state)
        scores[k] = holder[key]["mean_return"]
    state["selected"], state["selected_by"] = max(scores, key=lambda k: (scores[k], k)), name
    copy_weights(round_weights(run, state["selected"]), run / "best.safetensors")
    write_json(run / "dagger.json", state)


def check_weights(cfg: DaggerConfig, run: Path) -> dict[str, Any]:
    """The run's best weights driving cfg.check episodes alone (seeds CHECK_SEED..)."""
    return drive_weights(run, cfg.check, CHECK_SEED, workers=cfg.workers, ray=cfg.ray, max_steps=cfg.max_steps)


def drive_weights(run: Path, episodes: int, seed_start: int, workers: int = 1, ray: str | None = None, max_steps: int = EPISODE_STEPS) -> dict[str, Any]:
    """The run's best weights driving `episodes` episodes alone from seed_start on: the evaluation's own episodes, without the
    expert's reference rows."""
    row = evaluate(EvaluateConfig(runs=[str(run)], episodes=episodes, seed_start=seed_start, workers=workers, ray=ray,
                                  expert=False, max_steps=max_steps))[0]
    return {"seeds": row["seeds"], "returns": row["returns"], "tiles": row["tiles"], "skipped": row["skipped"], "mean_return": row["mean_return"],
            "finished_share": row["finished_share"]}


def selected_weights(state: dict[str, Any]) -> str:
    """Which round's weights select_round kept, beside what each candidate drove (for a job's summary)."""
    if state.get("selected_by", "check") == "check":  # runs from before selected_by was stored were all selected so
        drives = [("behaviour cloning", state["bc_check"])] + [(f"round {r['round']}", r["check"]) for r in state["rounds"]]
        where = "the check seeds"
    else:
        drives = [(f"round {r['round']}", r["selection"]) for r in state["rounds"] if "selection" in r]
        where = f"{len(drives[0][1]['returns'])} selection tracks"
    chosen = "behaviour cloning" if state["selected"] == 0 else f"round {state['selected']}"
    return f"{chosen}'s own, which drove {where} best (" + ", ".join(f"{name} {c['mean_return']:.1f}" for name, c in drives) + ")"


def check_worst(check: dict[str, Any]) -> str:
    """A check's worst episode, and the least share of its tiles an episode reached (a check kept before it was recorded: none)."""
    tiles = f", least tiles {min(check['tiles']):.0%}" if "tiles" in check else ""
    return f"worst {min(check['returns']):.1f}{tiles}"


def clean_mean_return(episodes: list[dict[str, Any]], seeds: list[int]) -> float:
    """The mean return of a round's rollouts (these seeds) that the policy drove unperturbed; NaN if none."""
    wanted = set(seeds)
    returns = [e["return"] for e in episodes if e["seed"] in wanted and not e.get("perturb")]
    return float(np.mean(returns)) if returns else math.nan


def rollout_perturbation(perturb: str, stride_jitter: int) -> str | None:
    """The perturbation a run's perturbed rollouts drive under (None: none), for DaggerConfig.perturb
    and the run's training windows' largest frame gap."""
    if perturb == "auto":
        return f"jitter={stride_jitter}" if stride_jitter > 1 else None
    return None if perturb == perturbations.CLEAN else perturb


def rollout_returns(r: dict[str, Any]) -> str:
    """A round's rollout mean return, with the perturbed rollouts' apart: "911.5 (under jitter=3: 903.0)"."""
    text = f"{r.get('rollout_mean_return', math.nan):.1f}"
    return text + (f" (under {r['perturb']}: {r['perturbed_mean_return']:.1f})" if "perturbed_mean_return" in r else "")


def round_seeds(cfg: DaggerConfig, r: int) -> list[int]:
    """Round r's rollout seeds: the next cfg.episodes seeds from cfg.seed_start on (with cfg.bend, of those whose track has
    such a bend)."""
    if cfg.bend:
        return seeds_with_bend(cfg.seed_start, cfg.episodes, cfg.bend, skip=(r - 1) * cfg.episodes)
    return [cfg.seed_start + (r - 1) * cfg.episodes + i for i in range(cfg.episodes)]


def drives_perturbed(spec: str | None, seed: int) -> bool:
    """Whether the rollout on this seed is driven under the perturbation spec: the odd seeds, when there is one."""
    return spec is not None and seed % 2 == 1


def rollout_batches(seeds: list[int], spec: str | None, batch: int) -> list[tuple[int, ...]]:
    """The rollouts' tasks: a perturbed one alone, the others `batch` at a time."""
    alone = [(s,) for s in seeds if drives_perturbed(spec, s)]
    together = [s for s in seeds if not drives_perturbed(spec, s)]
    return [tuple(together[i:i + batch]) for i in range(0, len(together), batch)] + alone
