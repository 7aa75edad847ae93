"""A study's report, rebuilt from its study.json alone: the aggregates of Agarwal et al. 2021 as
`rliable` computes them, a Markdown report, its numbers as JSON, and the plots.

Scores are returns, one matrix per group (a head, or variant/head) and level: training runs x
held-out episodes. Intervals are 95 % stratified bootstrap intervals that resample the training
runs and the held-out episodes (rliable's `task_bootstrap=True`): the episodes are a sample of
tracks, not a fixed benchmark, so both sources of variation are in the interval. A group with one
run has no interval over runs; the report says so rather than print a zero-width one.
"""

from __future__ import annotations

import contextlib
import json
import warnings
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from agents.carracing import scenarios
from agents.carracing.perturb import CLEAN, level_panel, parse_level
from agents.driving.rollout import lost_to_skip
from agents.training.recipe import BY_HEAD, UDACITY_FIELDS
from datasets.demos import seed_ranges
from nac.checkpoint import write_json
from nac.config import ConfigError


REFERENCE_HEAD = "nac"  # probability of improvement is stated for this head against the others
EXPERT = "expert"


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
    """{group: {"scores": (runs, episodes) returns, "runs": [run keys], "seeds": [episode seeds],
    "laps": share finished, "skipped": share of laps lost to a skipped tile, None if not recorded}} over the episode seeds every run of the group has driven."""
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
        laps = float(np.mean([e["lap_finished"] for e in eps]))
        # studies written before the skipped-tile count have no "skipped": None, not 0
        skipped = float(np.mean([lost_to_skip(e["lap_finished"], e["skipped"]) for e in eps])) if all("skipped" in e for e in eps) else None
        lost = [sum(not runs[k][s]["lap_finished"] for k in keys) for s in common]  # per held-out seed: runs without the lap
        out[g] = {"scores": scores, "runs": keys, "seeds": common, "laps": laps, "skipped": skipped, "lost": lost}
    return out


@contextlib.contextmanager
def _seeded(seed: int) -> Iterator[None]:
    """numpy's global generator seeded within, restored after: rliable's StratifiedBootstrap draws
    its resamples from it (update_indices calls np.random.choice) whatever random_state it is
    given, so without this a report's intervals change from one rebuild to the next."""
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)


def _rly():  # rliable imports seaborn and arch: only when a report is made
    from rliable import library as rly
    from rliable import metrics

    return rly, metrics


def aggregates(scores: dict[str, np.ndarray], reps: int = 2000, seed: int = 0) -> dict[str, dict[str, Any]]:
    """IQM and mean with 95 % stratified bootstrap intervals (rliable), per group."""
    rly, metrics = _rly()

    def both(s: np.ndarray) -> np.ndarray:
        return np.array([iqm(s), metrics.aggregate_mean(s)])

    cis: dict[str, np.ndarray] = {}
    for g, s in scores.items():  # each group from the same seed: its interval does not depend on the others in the study
        if s.shape[0] > 1:
            with warnings.catch_warnings(), _seeded(seed):
                warnings.simplefilter("ignore", FutureWarning)  # arch: RandomState is deprecated
                cis[g] = rly.get_interval_estimates({g: s}, both, reps=reps, random_state=np.random.RandomState(seed), task_bootstrap=True)[1][g]
    out = {}
    for g, s in scores.items():
        centre, mean = both(s)
        ci = cis.get(g)
        out[g] = {
            "runs": int(s.shape[0]), "episodes": int(s.shape[1]),
            "iqm": float(centre), "iqm_ci": None if ci is None else [float(ci[0, 0]), float(ci[1, 0])],
            "mean": float(mean), "mean_ci": None if ci is None else [float(ci[0, 1]), float(ci[1, 1])],
            "run_means": [float(x) for x in s.mean(axis=1)],
            "worst_run_mean": float(s.mean(axis=1).min()),
            "min_episode": float(s.min()),
            "episode_std": float(s.std(ddof=1)) if s.size > 1 else 0.0,  # over every (run, episode): the published tables' statistic
        }
    return out


def iqm(scores: np.ndarray) -> float:
    """rliable's metrics.aggregate_iqm (scipy's trim_mean of a quarter each side, over every score), to
    the bit: the same partition and mean, without scipy's argument handling, which cost ten times
    the statistic in each of a bootstrap's 2000 resamples."""
    a = scores.ravel()
    low = int(0.25 * a.size)
    return float(np.mean(np.partition(a, (low, a.size - low - 1))[low:a.size - low]))


def score_shares(scores: np.ndarray, taus: np.ndarray) -> np.ndarray:
    """rliable's score distribution (the share of scores above each tau), every tau at once: rliable's
    np.vectorize calls np.mean once per tau in each resample."""
    return (scores[..., None] > taus).mean(axis=(0, 1))


def improvement(x: np.ndarray, y: np.ndarray) -> float:
    """rliable's metrics.probability_of_improvement, to the bit: per task (column), the Mann-Whitney
    U of X's runs over Y's divided by the pairs (each pair X > Y counts 1, a tie a half), averaged over
    tasks. rliable sets 0.5 where the two columns are equal: the count gives exactly that. Computed over
    every task at once: rliable calls scipy's mannwhitneyu per task, and within a bootstrap of 500
    resamples that was 98 % of a report's time."""
    pairs = x[:, None, :] - y[None, :, :]  # (runs x, runs y, tasks)
    p = ((pairs > 0).sum(axis=(0, 1)) + 0.5 * (pairs == 0).sum(axis=(0, 1))) / (x.shape[0] * y.shape[0])
    return float(np.mean(p))


def probability_of_improvement(x: np.ndarray, y: np.ndarray, reps: int = 500, seed: int = 0) -> dict[str, Any]:
    """P(X > Y) (rliable: the Mann-Whitney statistic per episode seed, averaged) with its 95 %
    stratified bootstrap interval (rliable's, with `improvement` as the metric). x, y: (runs, episodes)
    on the same episode seeds."""
    rly, _ = _rly()
    point = improvement(x, y)
    if min(x.shape[0], y.shape[0]) < 2:
        return {"p": point, "ci": None}
    with warnings.catch_warnings(), _seeded(seed):
        warnings.simplefilter("ignore", FutureWarning)
        _, ci = rly.get_interval_estimates({"x,y": (x, y)}, improvement, reps=reps, random_state=np.random.RandomState(seed))
    lo, hi = np.asarray(ci["x,y"]).ravel()
    return {"p": point, "ci": [float(lo), float(hi)]}


def performance_profiles(scores: dict[str, np.ndarray], taus: np.ndarray, reps: int = 2000, seed: int = 0) -> dict[str, dict[str, Any]]:
    """Share of episodes with return >= tau, per group, with 95 % bootstrap bands where a group has several runs."""
    rly, _ = _rly()
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


def _level_value(level: str) -> tuple[str, float]:
    name, _, value = level.partition("=")
    return name, float(value) if value else 0.0


def _title(level: str) -> str:
    at = parse_level(level)
    if at.scenario == scenarios.CLEAN:
        return "Clean" if at.perturbation is None else f"Perturbation {at.perturbation}"
    return f"Scenario {at.scenario}" + ("" if at.perturbation is None else f", perturbation {at.perturbation}")


def scenario_columns(levels: list[str]) -> list[tuple[str, str]]:
    """(level, scenario) of the levels that are a scenario alone ("none": clean): the columns of the scenarios table."""
    return [(lv, at.scenario) for lv, at in zip(levels, map(parse_level, levels)) if at.perturbation is None]


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
        agg = aggregates(scores, reps)
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
                pairs[f"{x} > {y}"] = probability_of_improvement(scores[x][:, xi], scores[y][:, yi], max(100, reps // 4))
        entry["improvement"] = pairs
        if level == CLEAN:
            entry["offline_vs_closed_loop"] = offline_agreement(study, mats, key)
            entry["laps_lost_by_track"] = laps_lost_by_track(mats)
        result["levels"][level] = entry
    write_json(out / "report.json", result)
    figures = _plots(result, out)
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
        f"({'continuous' if cfg['continuous'] else 'discrete'} actions); {cfg['episodes']} held-out episodes per run on seeds "
        f"{cfg['seed_start']}..{cfg['seed_start'] + cfg['episodes'] - 1}"
        + (f", the first {cfg['perturb_episodes']} of them at each perturbation level" if cfg.get("perturb_episodes") not in (None, cfg["episodes"]) and len(cfg["levels"]) > 1 else "")
        + f". Runs trained: {n_done} of {n_runs}; episodes recorded: {len(study['episodes'])}.",
        "",
        "IQM = interquartile mean of all (run, episode) returns; intervals are 95 % stratified bootstrap intervals over training "
        f"runs and held-out episodes ({result['reps']} resamples, rliable). Rebuilt from study.json alone by `nacdrive study --report DIR`.",
        "",
    ]
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
        lines += ["Recipes as trained:", ""] + [f"- {v}: " + ", ".join(f"{k}={'by head' if val is None else val}" for k, val in r.items() if shown(k, val))
                                                for v, r in study["recipes"].items()] + [""]
    lines += scenario_table(result)
    key = offline_key(cfg)
    offline_name = "validation MSE" if key == "val_loss" else "offline accuracy"
    for level, entry in result["levels"].items():
        lines += [f"## {_title(level)}", "",
                  f"| group | runs x episodes | IQM [95 % CI] | mean [95 % CI] | mean ± std of episodes | worst run's mean | run means | worst episode | laps finished | lost to a skipped tile | {offline_name} |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        rows = sorted(entry["aggregates"].items(), key=lambda kv: (kv[0] == EXPERT, -kv[1]["iqm"]))
        for g, a in rows:
            lines.append(
                f"| {g} | {a['runs']} x {a['episodes']} | {_fmt_ci(a['iqm'], a['iqm_ci'])} | {_fmt_ci(a['mean'], a['mean_ci'])} "
                f"| {a['mean']:.0f} ± {a['episode_std']:.0f} | {a['worst_run_mean']:.1f} | {', '.join(f'{m:.0f}' for m in a['run_means'])} | {a['min_episode']:.1f} | {a['laps_finished']:.0%} "
                f"| {_fmt_share(a.get('lost_to_skipped_tile'))} | {_fmt_offline(a.get(key), key)} |"
            )
        lines += _published(level)
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
            lines += ["", "| comparison | P(X > Y) [95 % CI] |", "|---|---|"]
            for name, p in entry["improvement"].items():
                ci = f" [{p['ci'][0]:.2f}, {p['ci'][1]:.2f}]" if p["ci"] else " (one training run on a side: no interval)"
                lines.append(f"| {name} | {p['p']:.2f}{ci} |")
        lines.append("")
    if figures:
        lines += ["## Figures", ""] + [f"![{Path(f).stem}]({Path(f).name})" for f in figures] + [""]
    return "\n".join(lines)


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


def _plots(result: dict[str, Any], out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    clean = result["levels"].get(CLEAN)
    if clean:
        agg = {g: a for g, a in clean["aggregates"].items()}
        groups = sorted(agg, key=lambda g: (g == EXPERT, -agg[g]["iqm"]))
        fig, axes = plt.subplots(1, 3, figsize=(15, 0.5 * len(groups) + 2.2))
        for ax, metric in zip(axes[:2], ("iqm", "mean")):
            for i, g in enumerate(groups):
                a = agg[g]
                ci = a[f"{metric}_ci"]
                if ci:
                    ax.plot(ci, [i, i], lw=6, alpha=0.5, color=f"C{i}")
                ax.plot([a[metric]], [i], "|", ms=14, color="k")
            ax.set_yticks(range(len(groups)), groups)
            ax.set_xlabel(f"{metric.upper() if metric == 'iqm' else 'mean'} return (95 % CI)")
            ax.grid(alpha=0.3, axis="x")
        ax = axes[2]
        for i, g in enumerate(groups):
            ax.scatter(agg[g]["run_means"], [i] * len(agg[g]["run_means"]), color=f"C{i}")
        ax.set_yticks(range(len(groups)), groups)
        ax.set_xlabel("mean return of each training run")
        ax.grid(alpha=0.3, axis="x")
        fig.tight_layout()
        files.append(_save(fig, out / "aggregates.png", plt))
        if "profiles" in clean:
            prof = clean["profiles"]
            taus = np.asarray(prof["taus"])
            fig, ax = plt.subplots(figsize=(6.5, 4))
            for i, g in enumerate(sorted(k for k in prof if k != "taus")):
                ax.plot(taus, prof[g]["share"], label=g, color=f"C{i}")
                if prof[g]["ci"]:
                    ax.fill_between(taus, prof[g]["ci"][0], prof[g]["ci"][1], alpha=0.2, color=f"C{i}")
            ax.set_xlabel("return tau")
            ax.set_ylabel("share of episodes with return >= tau")
            ax.set_xlim(max(0.0, float(taus[0])), float(taus[-1]))
            ax.legend(fontsize=8)
            ax.grid(alpha=0.3)
            fig.tight_layout()
            files.append(_save(fig, out / "profiles.png", plt))
    pairs = [(lvl, k, p) for lvl, e in result["levels"].items() for k, p in e["improvement"].items()]
    if pairs:
        fig, ax = plt.subplots(figsize=(6.5, 0.45 * len(pairs) + 1.5))
        for i, (lvl, k, p) in enumerate(pairs):
            if p["ci"]:
                ax.plot(p["ci"], [i, i], lw=6, alpha=0.5, color="C0")
            ax.plot([p["p"]], [i], "|", ms=14, color="k")
        ax.axvline(0.5, color="grey", ls="--")
        ax.set_yticks(range(len(pairs)), [k if lvl == CLEAN else f"{k} ({lvl})" for lvl, k, _ in pairs])
        ax.set_xlabel("P(X > Y) (95 % CI)")
        ax.set_xlim(0, 1)
        fig.tight_layout()
        files.append(_save(fig, out / "improvement.png", plt))
    cols = scenario_columns(list(result["levels"]))
    if len(cols) > 1:  # IQM per scenario, one marker per group
        groups = sorted({g for lv, _ in cols for g in result["levels"][lv]["aggregates"]}, key=lambda g: (g == EXPERT, g))
        fig, ax = plt.subplots(figsize=(1.4 * len(cols) + 3, 4))
        width = 0.8 / max(1, len(groups))
        for i, g in enumerate(groups):
            for j, (lv, _) in enumerate(cols):
                a = result["levels"][lv]["aggregates"].get(g)
                if a is None:
                    continue
                x = j - 0.4 + width * (i + 0.5)
                if a["iqm_ci"]:
                    ax.plot([x, x], a["iqm_ci"], lw=4, alpha=0.5, color=f"C{i}")
                ax.plot([x], [a["iqm"]], "o", color=f"C{i}", label=g if j == 0 else None)
        ax.set_xticks(range(len(cols)), [name for _, name in cols])
        ax.set_ylabel("IQM return (95 % CI)")
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=8, loc="lower left")
        fig.tight_layout()
        files.append(_save(fig, out / "scenarios.png", plt))
    perturbed = [lv for lv in result["levels"] if lv != CLEAN and parse_level(lv).scenario == scenarios.CLEAN]  # clean scene, one perturbation
    kinds = sorted({_level_value(lv)[0] for lv in perturbed})
    if kinds:
        fig, axes = plt.subplots(1, len(kinds), figsize=(5 * len(kinds), 3.8), squeeze=False)
        for ax, kind in zip(axes[0], kinds):
            at = {lv: e for lv, e in result["levels"].items() if lv == CLEAN or (lv in perturbed and _level_value(lv)[0] == kind)}
            groups = sorted({g for e in at.values() for g in e["aggregates"]} - {EXPERT})
            for i, g in enumerate(groups):
                pts = sorted((_level_value(lv)[1], e["aggregates"][g]) for lv, e in at.items() if g in e["aggregates"])
                x = [p[0] for p in pts]
                y = [p[1]["iqm"] for p in pts]
                ax.plot(x, y, marker="o", label=g, color=f"C{i}")
                lo = [p[1]["iqm_ci"][0] if p[1]["iqm_ci"] else p[1]["iqm"] for p in pts]
                hi = [p[1]["iqm_ci"][1] if p[1]["iqm_ci"] else p[1]["iqm"] for p in pts]
                ax.fill_between(x, lo, hi, alpha=0.2, color=f"C{i}")
            level_panel(ax, kind, "IQM return (95 % CI)")
        axes[0][0].legend(fontsize=8)
        fig.tight_layout()
        files.append(_save(fig, out / "levels.png", plt))
    return files


def _save(fig: Any, path: Path, plt: Any) -> str:
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return str(path)
