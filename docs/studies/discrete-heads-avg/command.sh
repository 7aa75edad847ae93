# The study as it was run (2026-11-28, a clone of ebe1d4c, whose training code is HEAD's; one thread a job, two jobs at a time).
# 1. The quick start's discrete recipe (three DAgger rounds at most, the policy the mean of rounds 2..R), every head, seeds 0 and 1;
#    the 30 demonstrations (seeds 0..29) were copied into OUT/demos from the seed-0 discrete quick start (the same expert and seeds).
OMP_NUM_THREADS=1 nacdrive study --discrete --heads lstm gru cfc mha nac --seeds 2 --demos 30 --episodes 10 --workers 2 --out runs/dheads \
  --variant avg:epochs=6,balance=weights,net.wheel_target=true,net.wheel_speed=target,dagger_until=880,dagger_max_rounds=3,dagger_average=3
# 2. The same with up to four rounds: every finished avg run copied to avg4 first, so that DAgger goes on from where it stopped
#    (a run that stopped at two rounds stays as it was; the five that stopped at the cap of three each take a fourth round).
for r in runs/dheads/runs/avg/*/seed*; do h=$(basename "$(dirname "$r")"); mkdir -p runs/dheads/runs/avg4/$h; cp -a "$r" runs/dheads/runs/avg4/$h/; done
OMP_NUM_THREADS=1 nacdrive study --discrete --heads lstm gru cfc mha nac --seeds 2 --demos 30 --episodes 10 --workers 2 --out runs/dheads \
  --variant avg4:epochs=6,balance=weights,net.wheel_target=true,net.wheel_speed=target,dagger_until=880,dagger_max_rounds=4,dagger_average=3
nacdrive study --report runs/dheads
