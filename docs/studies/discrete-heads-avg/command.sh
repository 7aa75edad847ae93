cd /work/fc22
OMP_NUM_THREADS=1 .venv/bin/python -m scripts.cli study --discrete --heads lstm gru cfc mha nac --seeds 2 --demos 30 --episodes 10 --workers 2 --out /work/runs/dstudy3 \
  --variant avg:epochs=6,balance=weights,net.wheel_target=true,net.wheel_speed=target,dagger_until=880,dagger_max_rounds=3,dagger_average=3 > /work/runs/dstudy3.log 2>&1
