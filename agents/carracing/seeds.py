"""The track seeds each kind of episode drives, named once: ranges far apart, so that no held-out
track is ever one a run was trained, selected or checked on (evaluate refuses a run's own seeds).

- demonstrations: 0.. (the quick start's job seed S records 1000 S..);
- HELD_OUT_SEED..: evaluations, studies, videos and figures;
- SELECT_SEED..: closed-loop checkpoint selection (train --select-episodes);
- CHECK_SEED..: DAgger's check of a round's trained weights (dagger --check);
- DAGGER_SEED..: DAgger's rollouts (a study's training seed s from DAGGER_SEED + 1000 s).
"""

HELD_OUT_SEED = 10_000
SELECT_SEED = 20_000
CHECK_SEED = 30_000
DAGGER_SEED = 1_000_000
