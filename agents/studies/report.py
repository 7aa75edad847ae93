"""A study's report, rebuilt from its study.json alone: its numbers as JSON, the markdown report
(agents.studies.markdown), and the plots (agents.studies.plots); the figures per group are
agents.studies.aggregates'.

Scores are returns, one matrix per group (a head, or variant/head) and level: training runs x
held-out tracks. The training run is the unit: each run's own figures are a table of the report,
and every interval and P(X > Y) is over runs and tracks (agents.studies.stats); rliable gives the
IQM's definition and the performance profiles. A group with one run has no interval over runs; the
report says so rather than print a zero-width one, and flags every group of fewer than
stats.FEW_RUNS runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from agents.carracing.perturb import CLEAN
from agents.driving.rollout import lost_to_skip
from agents.studies import plots
from agents.studies.store import EXPERT, STUDY_FIX
from nac.checkpoint import read_json, write_json
from nac.config import ConfigError
from agents.studies.markdown import markdown, offline_key
from agents.studies.aggregates import aggregates, performance_profiles, probability_of_improvement


REFERENCE_HEAD = "nac"  # probability of improvement is stated for this head against the others


def load(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    f = p / "study.json" if p.is_dir() else p
    if not f.is_file():
        raise FileNotFoundError(f"{f} not found: give a study folder (nacdrive study --out DIR) or its study.json")
    data = read_json(f, STUDY_FIX)
    if not str(data.get("format", "")).startswith("nacdrive-study/"):
        raise ConfigError(f"{f} is not a study file")
    return data


def group_name(e: dict[str, Any], variants: list[str]) -> str:
    if e["head"] == EXPERT:
        return EXPERT
    return e["head"] if len(variants) <= 1 else f"{e['variant']}/{e['head']}"


def score_matrices(study: dict[str, Any], level: str) -> dict[str, dict[str, Any]]:
    """{group: {"scores": (runs, episodes) returns, "finished": (runs, episodes) laps finished, "runs": [run keys],
    "seeds": [episode seeds], "laps": share finished, "skipped": share of laps lost to a skipped tile, None if not recorded}} over the episode seeds every run of the group has driven."""
    variants = list(study["config"]["variants"])
    by_group: dict[str, dict[str, dict[int, dict[str, Any]]]] = {}
    for e in study["episodes"]:
        if e["level"] == level:
            by_group.setdefault(group_name(e, variants), {}).setdefault(e["run"], {})[e["episode_seed"]] = e
    out = {}
    for g, runs in by_group.items():
        common = sorted(set.intersection(*(set(r) for r in runs.values())))
        if not common:
            continue
        keys = sorted(runs)
        scores = np.array([[runs[k][s]["return"] for s in common] for k in keys], dtype=np.float64)
        eps = [runs[k][s] for k in keys for s in common]
        # studies written before the skipped-tile count have no "skipped": None, not 0
        skipped = float(np.mean([lost_to_skip(e["lap_finished"], e["skipped"]) for e in eps])) if all("skipped" in e for e in eps) else None
        finished = np.array([[bool(runs[k][s]["lap_finished"]) for s in common] for k in keys])
        out[g] = {"scores": scores, "finished": finished, "runs": keys, "seeds": common, "laps": float(finished.mean()), "skipped": skipped,
                  "lost": [int(n) for n in (~finished).sum(axis=0)]}  # per held-out seed: runs without the lap
    return out


def _pairs(groups: list[str], variants: list[str]) -> list[tuple[str, str]]:
    """(X, Y) pairs to state: the reference head against every other head of the same variant,
    and every variant of a head against the first variant of that head."""
    def split(g: str) -> tuple[str, str]:
        return (variants[0], g) if len(variants) <= 1 else tuple(g.split("/", 1))  # type: ignore[return-value]

    learned = [g for g in groups if g != EXPERT]
    pairs = []
    for g in learned:
        v, h = split(g)
        if h == REFERENCE_HEAD:
            pairs += [(g, o) for o in learned if o != g and split(o)[0] == v]
    if len(variants) > 1:
        for g in learned:
            v, h = split(g)
            base = f"{variants[0]}/{h}"
            if v != variants[0] and base in learned:
                pairs.append((g, base))
    return pairs


def build(study_dir: str | Path, out: str | Path | None = None, reps: int = 2000) -> dict[str, Any]:
    """Write report.md, report.json and the plots into `out` (default STUDY/report); returns the numbers."""
    study = load(study_dir)
    out = Path(out) if out is not None else (Path(study_dir) if Path(study_dir).is_dir() else Path(study_dir).parent) / "report"
    out.mkdir(parents=True, exist_ok=True)
    cfg = study["config"]
    variants = list(cfg["variants"])
    levels = list(dict.fromkeys([CLEAN, *cfg["levels"]]))
    result: dict[str, Any] = {"config": cfg, "reps": reps, "cost": cost(study), "levels": {}, "improvement": {}}
    taus = np.linspace(0.0, 1000.0, 101)
    key = offline_key(cfg)
    for level in levels:
        mats = score_matrices(study, level)
        if not mats:
            continue
        scores = {g: m["scores"] for g, m in mats.items()}
        agg = aggregates(scores, reps, laps={g: m["finished"] for g, m in mats.items()}, seeds={g: m["seeds"] for g, m in mats.items()})
        for g in agg:
            agg[g]["laps_finished"] = mats[g]["laps"]
            agg[g]["lost_to_skipped_tile"] = mats[g]["skipped"]
            agg[g]["run_keys"] = mats[g]["runs"]
            offline = [study["runs"].get(k, {}).get(key) for k in mats[g]["runs"]]
            agg[g][key] = [float(a) for a in offline if a is not None]
        learned = {g: s for g, s in scores.items() if g != EXPERT}
        entry: dict[str, Any] = {"aggregates": agg}
        if level == CLEAN and learned:
            entry["profiles"] = {"taus": taus.tolist(), **performance_profiles(learned, taus, reps)}
        pairs = {}
        for x, y in _pairs(sorted(learned), variants):
            common = sorted(set(mats[x]["seeds"]) & set(mats[y]["seeds"]))
            if common:
                xi = [mats[x]["seeds"].index(s) for s in common]
                yi = [mats[y]["seeds"].index(s) for s in common]
                pairs[f"{x} > {y}"] = probability_of_improvement(scores[x][:, xi], scores[y][:, yi], reps)
        entry["improvement"] = pairs
        if level == CLEAN:
            entry["offline_vs_closed_loop"] = offline_agreement(study, mats, key)
            entry["laps_lost_by_track"] = laps_lost_by_track(mats)
        result["levels"][level] = entry
    write_json(out / "report.json", result)
    figures = plots.draw(result, out)
    (out / "report.md").write_text(markdown(study, result, figures))
    return result


def laps_lost_by_track(mats: dict[str, dict[str, Any]]) -> dict[str, dict[str, int]]:
    """{held-out seed: {group: runs that did not finish its lap}} for the seeds where any learned
    run lost it, most lost first: whether the failures are a few hard tracks or spread out."""
    table: dict[int, dict[str, int]] = {}
    for g, m in mats.items():
        if g != EXPERT:
            for seed, n in zip(m["seeds"], m["lost"]):
                if n:
                    table.setdefault(seed, {})[g] = int(n)
    order = sorted(table, key=lambda seed: (-sum(table[seed].values()), seed))
    return {str(seed): table[seed] for seed in order}


def offline_agreement(study: dict[str, Any], mats: dict[str, dict[str, Any]], key: str) -> dict[str, Any] | None:
    """Whether the offline figure ranks the learned runs as driving does: Spearman's rank correlation
    between each run's offline figure and its mean return (scipy), over every run of every group.
    Oriented so that +1 means "better offline, better driving" (a lower MSE is better)."""
    from scipy.stats import spearmanr

    pairs = []
    for g, m in mats.items():
        if g == EXPERT:
            continue
        for k, row in zip(m["runs"], m["scores"]):
            v = study["runs"].get(k, {}).get(key)
            if v is not None:
                pairs.append((-v if key == "val_loss" else v, float(row.mean())))
    if len(pairs) < 3:
        return None
    x, y = np.array(pairs).T
    if np.ptp(x) == 0 or np.ptp(y) == 0:
        return None
    rho, p = spearmanr(x, y)
    return {"metric": key, "runs": len(pairs), "spearman": float(rho), "p_value": float(p)}


def cost(study: dict[str, Any]) -> dict[str, Any] | None:
    """The CPU time the study's tasks recorded (agents.studies.study.cpu_timed), in hours: training and episodes; None when it
    recorded none."""
    train = [r["cpu_seconds"] for r in study["runs"].values() if r.get("cpu_seconds") is not None]
    episodes = [e["cpu_seconds"] for e in study["episodes"] if e.get("cpu_seconds") is not None]
    if not train and not episodes:
        return None
    return {"training_hours": sum(train) / 3600, "runs": len(train), "episode_hours": sum(episodes) / 3600, "episodes": len(episodes)}


