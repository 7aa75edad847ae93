"""The track seeds each kind of episode drives, named once: ranges far apart, so that no track a
result is reported on is ever one a run was trained, selected or checked on (evaluate refuses a
run's own seeds).

- demonstrations: 0.. (the quick start's job seed S records 1000 S..);
- VALIDATION_SEED..: the tracks recipe decisions look at: evaluations, studies, videos and figures
  by default, and every study that chose a setting;
- TEST_SEED..: the tracks driven only for results that are reported, once, at the end, after every
  decision was taken on the validation tracks (`--seed-start TEST_SEED`);
- SELECT_SEED..: closed-loop checkpoint selection (train --select-episodes; dagger --select drive);
- CHECK_SEED..: DAgger's check of a round's trained weights (dagger --check);
- DAGGER_SEED..: DAgger's rollouts (a study's training seed s from DAGGER_SEED + 1000 s).
"""

from __future__ import annotations

VALIDATION_SEED = 10_000
SELECT_SEED = 20_000
CHECK_SEED = 30_000
TEST_SEED = 50_000
DAGGER_SEED = 1_000_000
RANGE = 10_000  # the validation and test ranges' size: VALIDATION_SEED .. VALIDATION_SEED + RANGE - 1


def track_range(start: int, count: int) -> str:
    """What the tracks start .. start + count - 1 are, for a report: 'validation tracks 10000..10049',
    'test tracks 50000..50009', or 'tracks S..E' where they are neither (or straddle both)."""
    end = start + count - 1
    span = f"{start}..{end}" if count > 1 else str(start)
    for name, first in (("validation", VALIDATION_SEED), ("test", TEST_SEED)):
        if first <= start and end < first + RANGE:
            return f"{name} tracks {span}"
    return f"tracks {span}"
