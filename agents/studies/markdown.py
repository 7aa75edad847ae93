"""A study's report as markdown: the grid and its cost, the recipes as trained, one table per level with each run's
mean, the published scores beside, and where the laps were lost."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np

from agents.carracing import scenarios
from agents.carracing.seeds import track_range
from agents.carracing.perturb import parse_level
from agents.studies import stats
from agents.studies.plots import scenario_columns
from agents.studies.store import EXPERT
from agents.training.recipe import RESOLVED_AT_TRAINING, UDACITY_FIELDS, Recipe
from datasets.demos import seed_ranges


def offline_key(cfg: dict[str, Any]) -> str:
    """The run's offline figure: the share of held-out expert frames whose action class it matches
    (carracing), or its validation MSE on steering (udacity, the paper's Udacity metric)."""
    return "val_loss" if cfg.get("task", "carracing") == "udacity" else "val_accuracy"



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


def markdown(study: dict[str, Any], result: dict[str, Any], figures: list[str]) -> str:
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
    fewest: dict[str, int] = {}  # each group's fewest runs over the levels (a run driven part way counts where it was driven)
    for e in result["levels"].values():
        for g, a in e["aggregates"].items():
            if g != EXPERT:
                fewest[g] = min(fewest.get(g, a["runs"]), a["runs"])
    few = [f"{g} ({n})" for g, n in sorted(fewest.items()) if n < stats.FEW_RUNS]
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
        shown = lambda k, val: used(k) and (val is not None or k in RESOLVED_AT_TRAINING)  # noqa: E731  # a None cap (minutes) is no cap: not shown
        lines += ["Recipes as trained:", ""] + [f"- {v}: " + ", ".join(f"{k}={'default' if val is None else val}" for k, val in Recipe.flatten(r).items() if shown(k, val))
                                                for v, r in study["recipes"].items()] + [""]
    lines += scenario_table(result)
    lines += run_means_table(result)
    lines += improvement_table(result)
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


def _scene_grid(cols: list[tuple[str, str]], intro: list[str], label: str, rows: list[str], cell: Callable[[str, str], str]) -> list[str]:
    """A table of rows x the scenario columns (level, scenario): the intro's lines, the header, and a row per name whose
    cells are cell(level, name)."""
    return [*intro, f"| {label} | " + " | ".join(name for _, name in cols) + " |", "|---|" + "---|" * len(cols),
            *(f"| {r} | " + " | ".join(cell(lv, r) for lv, _ in cols) + " |" for r in rows)]


def scenario_table(result: dict[str, Any]) -> list[str]:
    """Groups x scenarios, IQM [95 % CI] (laps finished), with the published means beside them: the
    study's generalization result at a glance ([] for a study without scenarios)."""
    cols = scenario_columns(list(result["levels"]))
    if len(cols) < 2:
        return []
    groups = sorted({g for lv, _ in cols for g in result["levels"][lv]["aggregates"]}, key=lambda g: (g == EXPERT, g))

    def cell(lv: str, g: str) -> str:
        a = result["levels"][lv]["aggregates"].get(g)
        return "-" if a is None else f"{_fmt_ci(a['iqm'], a['iqm_ci'])} ({a['laps_finished']:.0%})"

    lines = _scene_grid(cols, ["## Scenarios", "", "IQM [95 % CI] (laps finished) of every group in each scenario; the published rows "
                               f"are means over 100 episodes of agents trained on clean frames, measured on {scenarios.PUBLISHED_ON}.", ""],
                        "group", groups, cell)
    for agent, scores in scenarios.PUBLISHED.items():
        lines.append(f"| {agent} (published) | " + " | ".join(f"{scores[k][0]} ± {scores[k][1]}" if k in scores else "-" for _, k in cols) + " |")
    return lines + [""]


def run_means_table(result: dict[str, Any]) -> list[str]:
    """Groups x scenarios, the lowest run mean and the mean of run means: a pooled IQM hides a weak run, this
    table shows it ([] for a study without scenarios)."""
    cols = scenario_columns(list(result["levels"]))
    if len(cols) < 2:
        return []
    groups = sorted({g for lv, _ in cols for g in result["levels"][lv]["aggregates"] if g != EXPERT})

    def cell(lv: str, g: str) -> str:
        a = result["levels"][lv]["aggregates"].get(g)
        return "-" if a is None else f"{min(a['run_means']):.0f} / {np.mean(a['run_means']):.0f} ({a['runs']})"

    return _scene_grid(cols, ["Run by run: the lowest run mean / the mean of run means (runs) in each scenario.", ""], "group", groups, cell) + [""]


def improvement_table(result: dict[str, Any]) -> list[str]:
    """Comparisons x scenarios, P(X > Y) over runs with its 95 % interval; **bold** where the interval leaves out
    0.5 (the comparison separates), the rest do not ([] for a study without scenarios or comparisons)."""
    cols = scenario_columns(list(result["levels"]))
    names = list(dict.fromkeys(n for lv, _ in cols for n in result["levels"][lv]["improvement"]))
    if len(cols) < 2 or not names:
        return []

    def cell(lv: str, name: str) -> str:
        p = result["levels"][lv]["improvement"].get(name)
        if p is None:
            return "-"
        if not p["ci"]:
            return f"{p['p']:.2f} (no interval)"
        text = f"{p['p']:.2f} [{p['ci'][0]:.2f}, {p['ci'][1]:.2f}]"
        return f"**{text}**" if p["ci"][0] > 0.5 or p["ci"][1] < 0.5 else text

    return _scene_grid(cols, ["P(X > Y) over runs [95 % CI] in each scenario; **bold**: the interval leaves out 0.5, the runs separate "
                              "the two; the rest do not.", ""], "comparison", names, cell) + [""]
