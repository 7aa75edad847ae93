"""A study report's figures, drawn from its numbers (agents.studies.report.build's result) with
matplotlib: the groups' aggregates and run means, the performance profiles, P(X > Y), the
scenarios, and the return against each perturbation's level."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from agents.carracing import scenarios
from agents.carracing.perturb import CLEAN, level_panel, parse_level
from agents.studies.store import EXPERT


def level_value(level: str) -> tuple[str, float]:
    """'drop=0.4' -> ('drop', 0.4); a level without a value is at 0."""
    name, _, value = level.partition("=")
    return name, float(value) if value else 0.0


def scenario_columns(levels: list[str]) -> list[tuple[str, str]]:
    """(level, scenario) of the levels that are a scenario alone ("none": clean): the columns of the scenarios table."""
    return [(lv, at.scenario) for lv, at in zip(levels, map(parse_level, levels)) if at.perturbation is None]


def draw(result: dict[str, Any], out: Path) -> list[str]:
    """Write the report's figures into `out`; returns their paths."""
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
        ax.set_xlabel("P(X > Y) over runs (95 % CI)")
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
    kinds = sorted({level_value(lv)[0] for lv in perturbed})
    if kinds:
        fig, axes = plt.subplots(1, len(kinds), figsize=(5 * len(kinds), 3.8), squeeze=False)
        for ax, kind in zip(axes[0], kinds):
            at = {lv: e for lv, e in result["levels"].items() if lv == CLEAN or (lv in perturbed and level_value(lv)[0] == kind)}
            groups = sorted({g for e in at.values() for g in e["aggregates"]} - {EXPERT})
            for i, g in enumerate(groups):
                pts = sorted((level_value(lv)[1], e["aggregates"][g]) for lv, e in at.items() if g in e["aggregates"])
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
