"""A study's report, rebuilt from its study.json alone: a Markdown report, its numbers as JSON, and
the plots (agents.studies.plots).

Scores are returns, one matrix per group (a head, or variant/head) and level: training runs x
held-out tracks. The training run is the unit: each run's own figures are a table of the report,
and every interval and P(X > Y) is over runs and tracks (agents.studies.stats); rliable gives the
IQM's definition and the performance profiles. A group with one run has no interval over runs; the
report says so rather than print a zero-width one, and flags every group of fewer than
stats.FEW_RUNS runs.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from agents.carracing import scenarios
from agents.carracing.env import RETURN_BOUNDS
from agents.carracing.seeds import track_range
from agents.carracing.perturb import CLEAN, parse_level
from agents.driving.rollout import lost_to_skip
from agents.studies import plots, stats
from agents.studies.plots import scenario_columns
from agents.studies.store import EXPERT
from agents.training.recipe import BY_HEAD, UDACITY_FIELDS, Recipe
from datasets.demos import seed_ranges
from nac.checkpoint import write_json
from nac.config import ConfigError


REFERENCE_HEAD = "nac"  # probability of improvement is stated for this head against the others


def load(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    f = p / "study.json" if p.is_dir() else p
    if not f.is_file():
        raise FileNotFoundError(f"{f} not found: give a study folder (nacdrive study --out DIR) or its study.json")
    data = json.loads(f.read_text())
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


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """numpy's global generator seeded within, restored after: rliable's StratifiedBootstrap draws
    its resamples from it (update_indices calls np.random.choice) whatever random_state it is
    given, so without this a report's profile bands change from one rebuild to the next."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def aggregates(scores: dict[str, np.ndarray], reps: int = 2000, seed: int = 0, laps: dict[str, np.ndarray] | None = None,
               seeds: dict[str, list[int]] | None = None) -> dict[str, dict[str, Any]]:
    """Per group: IQM and mean with their 95 % intervals over runs and tracks (agents.studies.stats),
    and each run's own figures (`per_run`, where the laps and track seeds are given)."""
    out = {}
    for g, s in scores.items():  # each group from the same seed: its interval does not depend on the others in the study
        run_means = s.mean(axis=1)
        out[g] = {
            "runs": int(s.shape[0]), "episodes": int(s.shape[1]),
            "iqm": float(stats.iqm(s)), "iqm_ci": stats.interval(stats.iqm, s, reps, seed, bounds=RETURN_BOUNDS),
            "mean": float(s.mean()), "mean_ci": stats.interval(stats.mean, s, reps, seed, bounds=RETURN_BOUNDS),
            "run_means": [float(x) for x in run_means],
            "worst_run_mean": float(run_means.min()),
            "run_std": float(run_means.std(ddof=1)) if len(run_means) > 1 else None,  # the run-to-run spread of means
            "min_episode": float(s.min()),
            "episode_std": float(s.std(ddof=1)) if s.size > 1 else 0.0,  # over every (run, episode): the published tables' statistic
        }
        if laps is not None and seeds is not None:
            out[g]["per_run"] = stats.per_run(s, laps[g], seeds[g])
    return out


def probability_of_improvement(x: np.ndarray, y: np.ndarray, reps: int = 2000, seed: int = 0) -> dict[str, Any]:
    """P(X > Y) over runs with its 95 % interval (agents.studies.stats.improvement_interval), the
    difference of the groups' mean run means, and the runs per group that would separate it.
    x, y: (runs, tracks) on the same tracks."""
    out = stats.improvement_interval(x, y, reps, seed)
    out.update(runs=[int(x.shape[0]), int(y.shape[0])], difference=float(x.mean() - y.mean()), runs_needed=stats.runs_needed(x, y))
    return out


def score_shares(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """rliable's score distribution (the share of scores above each tau), every tau at once: rliable's
    np.vectorize calls np.mean once per tau in each resample."""
    return (scores[..., None] > taus).mean(axis=(0, 1))


def performance_profiles(scores: dict[str, np.ndarray], taus: np.ndarray, reps: int = 2000, seed: int = 0) -> dict[str, dict[str, Any]]:
    """Share of episodes with return >= tau, per group, with 95 % bootstrap bands where a group has several runs."""
    from rliable import library as rly  # rliable imports seaborn and arch: only when a report is made

    with warnings.catch_warnings(), _seeded(seed):
        warnings.simplefilter("ignore", FutureWarning)
        prof, cis = rly.create_performance_profile(scores, taus, custom_profile_func=score_shares, reps=reps)
    return {g: {"share": [float(v) for v in prof[g]], "ci": cis[g].tolist() if scores[g].shape[0] > 1 else None} for g in scores}


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


def _title(level: str) -> str:
    at = parse_level(level)
    if at.scenario == scenarios.CLEAN:
        return "Clean" if at.perturbation is None else f"Perturbation {at.perturbation}"
    return f"Scenario {at.scenario}" + ("" if at.perturbation is None else f", perturbation {at.perturbation}")


def _published(level: str) -> list[str]:
    """The published scores of the scenario `level`, as report lines ([] if none, and for clean)."""
    at = parse_level(level)
    if at.perturbation is not None or at.scenario == scenarios.CLEAN:
        return []
    scores = [f"{agent} {s[level][0]} ± {s[level][1]}" for agent, s in scenarios.PUBLISHED.items() if level in s]
    if not scores:
        return []
    return ["", f"Published (trained on clean frames, mean ± std over 100 episodes, measured on {scenarios.PUBLISHED_ON}, "
            f"not this project's CarRacing-v3): {'; '.join(scores)}."]


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
    (out / "report.md").write_text(_markdown(study, result, figures))
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


def offline_key(cfg: dict[str, Any]) -> str:
    """The run's offline figure: the share of held-out expert frames whose action class it matches
    (carracing), or its validation MSE on steering (udacity, the paper's Udacity metric)."""
    return "val_loss" if cfg.get("task", "carracing") == "udacity" else "val_accuracy"


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


def _fmt_offline(values: list[float] | None, key: str) -> str:
    if not values:
        return "-"
    spec = ".4f" if key == "val_loss" else ".1%"
    return f"{np.mean(values):{spec}}" + (f" ± {np.std(values, ddof=1):{spec}}" if len(values) > 1 else "")


def _fmt_share(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def _fmt_ci(v: float, ci: list[float] | None) -> str:
    return f"{v:.1f} [{ci[0]:.1f}, {ci[1]:.1f}]" if ci else f"{v:.1f} (one run)"


LOST_ROWS = 12  # tracks shown in the report's "where the laps were lost" table


def _training_seeds(study: dict[str, Any]) -> str:
    """The training seeds of the study's runs, as "0..3" or "0..2, 5": a study grown by several
    invocations (--first-seed S --seeds N) holds more than its stored config's range."""
    cfg = study["config"]
    seeds = {int(r["seed"]) for r in study["runs"].values() if "seed" in r} or set(range(cfg["first_seed"], cfg["first_seed"] + cfg["seeds"]))
    return seed_ranges(sorted(seeds), sep="..")


def cost(study: dict[str, Any]) -> dict[str, Any] | None:
    """The CPU time the study's tasks recorded (agents.studies.study.cpu_timed), in hours: training and episodes; None when it
    recorded none."""
    train = [r["cpu_seconds"] for r in study["runs"].values() if r.get("cpu_seconds") is not None]
    episodes = [e["cpu_seconds"] for e in study["episodes"] if e.get("cpu_seconds") is not None]
    if not train and not episodes:
        return None
    return {"training_hours": sum(train) / 3600, "runs": len(train), "episode_hours": sum(episodes) / 3600, "episodes": len(episodes)}


def _markdown(study: dict[str, Any], result: dict[str, Any], figures: list[str]) -> str:
    cfg = study["config"]
    n_done = sum(1 for r in study["runs"].values() if r.get("done"))
    n_runs = len(study["asked"]) if "asked" in study else len(cfg["heads"]) * cfg["seeds"] * len(cfg["variants"])  # older files: the whole grid
    lines = [
        "# Study report",
        "",
        f"Heads {', '.join(cfg['heads'])}; training seeds {_training_seeds(study)}; "
        f"variants {', '.join(f'{k} {v or {}}' for k, v in cfg['variants'].items())}; {cfg['demos']} {cfg['expert']}-expert demonstrations "
        f"({'continuous' if cfg['continuous'] else 'discrete'} actions); {cfg['episodes']} held-out episodes per run on "
        f"{track_range(cfg['seed_start'], cfg['episodes'])}"
        + (f", the first {cfg['perturb_episodes']} of them at each perturbation level" if cfg.get("perturb_episodes") not in (None, cfg["episodes"]) and len(cfg["levels"]) > 1 else "")
        + f". Runs trained: {n_done} of {n_runs}; episodes recorded: {len(study['episodes'])}.",
        "",
        "The training run is the unit: each run's own figures are in the per-run tables. IQM = interquartile mean of all (run, track) "
        "returns of a group; its interval and the mean's are 95 % intervals over training runs and tracks (Student's t, the standard error "
        "from a bootstrap of whole runs and of tracks, agents/studies/stats.py). P(X > Y) is the chance that a run of X has a higher mean "
        "than a run of Y on the same tracks, with Newcombe's 95 % interval widened by the tracks' share; 'runs to separate' is how many runs "
        "per group a t-test of run means would need to tell the observed difference apart (80 % power), from the run-to-run spread. "
        f"{result['reps']} resamples; rebuilt from study.json alone by `nacdrive study --report DIR`.",
        "",
    ]
    few = sorted({f"{g} ({a['runs']})" for e in result["levels"].values() for g, a in e["aggregates"].items() if g != EXPERT and a["runs"] < stats.FEW_RUNS})
    if few:
        lines += [f"**Fewer than {stats.FEW_RUNS} training runs** in {', '.join(few)}: their intervals are wide and their P(X > Y) coarse; "
                  "a difference between them is a hint to test with more runs, not a result.", ""]
    spent = result.get("cost")
    if spent:
        lines += [f"CPU time recorded: {spent['training_hours'] + spent['episode_hours']:.1f} CPU-hours: training {spent['training_hours']:.1f} "
                  f"({spent['runs']} runs, behaviour cloning and DAgger), held-out episodes {spent['episode_hours']:.1f} ({spent['episodes']} "
                  "episodes, the expert's included); a task cut short by a stop is not counted, nor are runs and episodes of studies "
                  "from before the cost was recorded.", ""]
    diverged = {k: r["diverged"] for k, r in study["runs"].items() if r.get("diverged")}
    if diverged:  # counted as trained, never driven: a head's aggregates above leave them out, and say so here
        lines += [f"Runs that diverged ({len(diverged)}; trained until their loss was no longer finite, not driven, "
                  "not in the aggregates below):", ""] + [f"- {k}: {m}" for k, m in sorted(diverged.items())] + [""]
    if study.get("recipes"):  # every field, as trained (studies from before they were stored have only the overrides above)
        used = (lambda k: k in UDACITY_FIELDS) if cfg.get("task") == "udacity" else (lambda k: True)  # PilotNet runs: no DAgger, no windows
        shown = lambda k, val: used(k) and (val is not None or k in BY_HEAD)  # noqa: E731  # a None cap (minutes) is no cap: not shown
        lines += ["Recipes as trained:", ""] + [f"- {v}: " + ", ".join(f"{k}={'by head' if val is None else val}" for k, val in Recipe.flatten(r).items() if shown(k, val))
                                                for v, r in study["recipes"].items()] + [""]
    lines += scenario_table(result)
    key = offline_key(cfg)
    offline_name = "validation MSE" if key == "val_loss" else "offline accuracy"
    for level, entry in result["levels"].items():
        lines += [f"## {_title(level)}", "",
                  f"| group | runs x tracks | IQM [95 % CI] | mean [95 % CI] | mean ± std of episodes | run means | sd of run means | worst episode | laps finished | lost to a skipped tile | {offline_name} |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        rows = sorted(entry["aggregates"].items(), key=lambda kv: (kv[0] == EXPERT, -kv[1]["iqm"]))
        for g, a in rows:
            lines.append(
                f"| {g} | {a['runs']} x {a['episodes']} | {_fmt_ci(a['iqm'], a['iqm_ci'])} | {_fmt_ci(a['mean'], a['mean_ci'])} "
                f"| {a['mean']:.0f} ± {a['episode_std']:.0f} | {', '.join(f'{m:.0f}' for m in a['run_means'])} | {_fmt_num(a.get('run_std'))} "
                f"| {a['min_episode']:.1f} | {a['laps_finished']:.0%} | {_fmt_share(a.get('lost_to_skipped_tile'))} | {_fmt_offline(a.get(key), key)} |"
            )
        lines += _published(level)
        lines += _per_run_table(rows, key, offline_name, study)
        agree = entry.get("offline_vs_closed_loop")
        if agree:
            lines += ["", f"Does the {offline_name} rank the runs as driving does? Spearman's rank correlation between each run's "
                      f"{offline_name} and its mean return, over {agree['runs']} runs: {agree['spearman']:+.2f} (p = {agree['p_value']:.2f}; "
                      "+1: better offline is better driving, 0: no relation)."]
        lost = entry.get("laps_lost_by_track")
        if lost:
            groups = [g for g, _ in rows if g != EXPERT]
            shown = list(lost)[:LOST_ROWS]
            lines += ["", "Where the laps were lost: per held-out track, how many runs of each group did not finish it"
                      + (f" (the {LOST_ROWS} tracks with the most; {len(lost)} in all)" if len(lost) > LOST_ROWS else "") + ".", "",
                      "| track (seed) | " + " | ".join(f"{g} ({entry['aggregates'][g]['runs']} runs)" for g in groups) + " |",
                      "|---|" + "---|" * len(groups)]
            lines += [f"| {seed} | " + " | ".join(str(lost[seed].get(g, 0)) for g in groups) + " |" for seed in shown]
        if entry["improvement"]:
            lines += ["", "| comparison | runs X, Y | P(X > Y) over runs [95 % CI] | difference of means | runs to separate it |", "|---|---|---|---|---|"]
            for name, p in entry["improvement"].items():
                ci = f" [{p['ci'][0]:.2f}, {p['ci'][1]:.2f}]" if p["ci"] else " (one training run on a side: no interval)"
                lines.append(f"| {name} | {p['runs'][0]}, {p['runs'][1]} | {p['p']:.2f}{ci} | {p['difference']:+.1f} | {_fmt_needed(p['runs_needed'])} |")
        lines.append("")
    if figures:
        lines += ["## Figures", ""] + [f"![{Path(f).stem}]({Path(f).name})" for f in figures] + [""]
    return "\n".join(lines)


def _per_run_table(rows: list[tuple[str, dict[str, Any]]], key: str, offline_name: str, study: dict[str, Any]) -> list[str]:
    """Each learned run's own figures at a level: the unit every interval and P(X > Y) counts."""
    learned = [(g, a) for g, a in rows if g != EXPERT and "per_run" in a]
    if not learned:
        return []
    lines = ["", f"Each training run over its {learned[0][1]['episodes']} tracks:", "",
             f"| group | run | mean | IQM | laps finished | worst track (return) | {offline_name} |", "|---|---|---|---|---|---|---|"]
    for g, a in learned:
        for k, r in zip(a["run_keys"], a["per_run"]):
            offline = study["runs"].get(k, {}).get(key)
            lines.append(f"| {g} | {k.rsplit('/', 1)[-1]} | {r['mean']:.1f} | {r['iqm']:.1f} | {r['laps']:.0%} | {r['worst_track']} ({r['worst']:.1f}) "
                         f"| {_fmt_offline(None if offline is None else [offline], key)} |")
    return lines


def _fmt_num(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def _fmt_needed(n: int | None) -> str:
    if n is None:
        return "-"
    return f"more than {stats.RUNS_CAP}" if n > stats.RUNS_CAP else str(n)


def scenario_table(result: dict[str, Any]) -> list[str]:
    """Groups x scenarios, IQM [95 % CI] (laps finished), with the published means beside them: the
    study's generalization result at a glance ([] for a study without scenarios)."""
    cols = scenario_columns(list(result["levels"]))
    if len(cols) < 2:
        return []
    groups = sorted({g for lv, _ in cols for g in result["levels"][lv]["aggregates"]}, key=lambda g: (g == EXPERT, g))
    lines = ["## Scenarios", "", "IQM [95 % CI] (laps finished) of every group in each scenario; the published rows are means over 100 "
             f"episodes of agents trained on clean frames, measured on {scenarios.PUBLISHED_ON}.", "",
             "| group | " + " | ".join(name for _, name in cols) + " |", "|---|" + "---|" * len(cols)]
    for g in groups:
        cells = []
        for lv, _ in cols:
            a = result["levels"][lv]["aggregates"].get(g)
            cells.append("-" if a is None else f"{_fmt_ci(a['iqm'], a['iqm_ci'])} ({a['laps_finished']:.0%})")
        lines.append(f"| {g} | " + " | ".join(cells) + " |")
    for agent, scores in scenarios.PUBLISHED.items():
        lines.append(f"| {agent} (published) | " + " | ".join(f"{scores[k][0]} ± {scores[k][1]}" if k in scores else "-" for _, k in cols) + " |")
    return lines + [""]
