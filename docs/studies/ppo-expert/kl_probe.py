"""One PPO minibatch step from the warm start at several learning rates: the approximate KL it makes on the rollout.

Run from the repository root with a run of `nacdrive expert train` in runs/ppo-warm3 (its checkpoint at 0 steps):
    python docs/studies/ppo-expert/kl_probe.py
"""
import copy

import numpy as np
import torch

import agents.experts.ppo as ppo
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import VecNormalize

def main():
    cfg = ppo.PPOTrainConfig(out="", envs=2)
    venv = VecNormalize.load("runs/ppo-warm3/checkpoints/ppo_vecnormalize_0_steps.pkl", ppo.vec_env(cfg, 2, 7))
    model = PPO.load("runs/ppo-warm3/checkpoints/ppo_0_steps.zip", env=venv, device="cpu")
    model.tensorboard_log = None
    state = copy.deepcopy(model.policy.state_dict())
    opt_state = copy.deepcopy(model.policy.optimizer.state_dict())
    real_train = PPO.train
    def probe(self):
        buf = self.rollout_buffer
        for lr in (1e-4, 3e-5, 1e-5, 3e-6, 1e-6):
            for steps in (1, 10):
                self.policy.load_state_dict(state); self.policy.optimizer.load_state_dict(opt_state)
                self.lr_schedule = lambda _: lr
                self.target_kl, self.n_epochs = None, 1
                # `steps` minibatch steps of PPO's loss by SB3's own update, its one epoch cut to those minibatches
                batches = [b for _, b in zip(range(steps), buf.get(self.batch_size))]
                buf.get = lambda bs, _b=batches: iter(_b)
                real_train(self)
                del buf.get  # the class's own again
                with torch.no_grad():
                    kls = []
                    for d in buf.get(256):
                        _, logp, _ = self.policy.evaluate_actions(d.observations, d.actions)
                        lr_ = logp - d.old_log_prob
                        kls.append(float(((lr_.exp() - 1) - lr_).mean()))
                print(f"lr {lr:.0e} steps {steps}: approx KL on the rollout {np.mean(kls):.4f}", flush=True)
    PPO.train = probe
    model.learn(total_timesteps=1024, reset_num_timesteps=True)

if __name__ == "__main__":
    main()
