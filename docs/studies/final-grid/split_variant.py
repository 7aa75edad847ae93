"""Move one variant out of a study.json into a file of its own, so that the report counts the other variants only:
the final grid's study.json still holds the first start's `cj` episodes (NAC and LSTM seed 0, superseded by `cjr`).

    python docs/studies/final-grid/split_variant.py docs/studies/final-grid/study.json cj docs/studies/final-grid/study-cj.json

Both files keep the study's format; the first loses the variant's recipe, runs, episodes and asked runs (config.variants
too), the second holds them alone. Run it when no study process writes the file."""

from __future__ import annotations

import argparse
import json
import sys


def split(study: dict, name: str) -> tuple[dict, dict]:
    """(study without the variant, the variant's part alone)."""
    mine = lambda run: run.split("/", 1)[0] == name  # noqa: E731  run keys are variant/head/seedN
    keep, moved = json.loads(json.dumps(study)), json.loads(json.dumps(study))
    for part, pick in ((keep, lambda b: not b), (moved, bool)):
        part["recipes"] = {k: v for k, v in study["recipes"].items() if pick(k == name)}
        part["config"]["variants"] = {k: v for k, v in study["config"]["variants"].items() if pick(k == name)}
        part["runs"] = {k: v for k, v in study["runs"].items() if pick(mine(k))}
        part["asked"] = [k for k in study["asked"] if pick(mine(k))]
        part["episodes"] = [e for e in study["episodes"] if e["variant"] == "-" or pick(e["variant"] == name)]
    return keep, moved


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("study", help="the study.json to split (rewritten without the variant)")
    p.add_argument("variant", help="the variant to move out")
    p.add_argument("out", help="where the variant's part goes")
    a = p.parse_args()
    with open(a.study) as f:
        study = json.load(f)
    if a.variant not in study["recipes"]:
        print(f"split_variant: no variant {a.variant!r} in {a.study}; it has {', '.join(study['recipes'])}", file=sys.stderr)
        return 2
    keep, moved = split(study, a.variant)
    for path, part in ((a.out, moved), (a.study, keep)):
        with open(path, "w") as f:
            json.dump(part, f)
    print(f"{a.study}: {len(keep['runs'])} runs, {len(keep['episodes'])} episodes; {a.out}: {len(moved['runs'])} runs, "
          f"{len(moved['episodes'])} episodes (the expert's in both)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
