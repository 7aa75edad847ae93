"""How a study's runs are trained: the recipe's fields and defaults, a variant's overrides parsed from
`NAME:KEY=VALUE,...`, and what recipes stored by older versions were trained by."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from typing import Any

from agents.carracing.env import EPISODE_STEPS
from agents.training.bc import frame_gaps
from agents.training.dagger import FIRST_SEED, DaggerConfig
from agents.training.loop import TrainConfig
from nac.config import ConfigDict, ConfigError, need


@dataclass
class Recipe(ConfigDict):
    """How one run is trained; the defaults are agents/pretrained/README.md's recipe."""

    WHAT = "recipe fields"

    epochs: int = 4  # behaviour-cloning epochs on the demonstrations
    dagger_rounds: int = 2  # DAgger rounds after it (0: pure behaviour cloning)
    dagger_until: float = 0.0  # > 0: then one more round while the last round's rollouts or trained weights average below this return or lose a track (dagger --until) ...
    dagger_check: int = DaggerConfig.check  # ... driving this many alone (dagger --check; 0: the rollouts alone) ...
    dagger_max_rounds: int = 0  # ... up to this many rounds in all (dagger --max-rounds)
    dagger_episodes: int = 10  # policy rollouts per round, labelled by the expert
    dagger_epochs: int = 2  # training epochs after each round
    dagger_average: int = DaggerConfig.average  # > 1: the run's weights are the mean of its last K rounds' own, from round 2 on (dagger --average)
    dagger_beta: float | None = DaggerConfig.beta  # round r executes the expert's action with probability beta ** r; None: the
    # recipe's for each head (agents.training.dagger.recipe_beta)
    dagger_off_road: int = DaggerConfig.off_road_steps  # > 0: a DAgger rollout ends once the car has been off the road this many steps in a row
    dagger_takeover: float = DaggerConfig.takeover  # > 0: the expert takes over a DAgger rollout while the car is this many u/s too fast or off the road (dagger --takeover)
    dagger_perturb: str = DaggerConfig.perturb  # the policy drives half the DAgger rollouts under this perturbation (dagger --perturb; auto: the run's frame gaps)
    window: int = 8  # frames per window
    stride_jitter: int | None = None  # > 1: windows with irregular frame gaps 1..J (true timestamps kept) ...
    regular_share: float | None = None  # ... except this share of them; None: the recipe's for the head (agents.training.bc.frame_gaps)
    arrival_windows: bool = False  # DAgger rows a perturbed policy decided on train on the windows it saw (train --arrival-windows)
    shift: int = 0  # random image shifts of up to this many pixels (train --shift)
    augment: str = "none"  # an augmentation against visual shift (train --augment; agents.training.augment)
    select_episodes: int = 0  # > 0: best weights by closed-loop return over this many episodes (train --select-episodes)
    lr: float = 1e-4  # Adam learning rate
    ema: float = 0.0  # > 0: keep and judge a moving average of the weights, this decay per step (train --ema)
    batch_size: int = 32
    loss: str = "mse"  # continuous actions: "mse" or "l1" (agents.training.bc.loss_terms)
    balance: str = "auto"  # class imbalance (train --balance): auto = weighted loss for discrete actions, none for continuous
    turn_weight: float = 0.0  # wheel-angle networks: the angle's error weighted where the expert's plan turns fast (train --turn-weight)
    val_fraction: float = 0.2  # share of the demonstrations held out for validation (the paper's CarRacing split: 0.1)
    noise: float = 0.0  # DART: std of the steering drift in the demonstrations (collect --noise); each value is its own set
    net: dict[str, Any] = field(default_factory=dict)  # more network options, e.g. {"use_time": false, "nac": {"mode": "euler"}}

    def __post_init__(self) -> None:
        need(self.dagger_rounds >= 0, f"dagger_rounds must be >= 0 (got {self.dagger_rounds})")
        need(isinstance(self.net, dict), "net must be a JSON object of network options")
        need(0.0 <= self.noise <= 1.0, f"noise must be in [0, 1] (got {self.noise})")
        # every other field is checked where it is used, with that config's own messages
        self.train_config("<demos>", "<run>", head="nac", seed=0)
        if self.dagger_rounds:
            try:
                self.dagger_config("<run>", expert="track", seed=0)
            except ConfigError as e:  # its fields are dagger_* here
                raise ConfigError(f"the DAgger rounds' {e}") from None

    def train_config(self, demos: str, out: str, head: str, seed: int, task: str = "carracing", max_steps: int = EPISODE_STEPS, device: str = "auto",
                     continuous: bool = True) -> TrainConfig:
        """The behaviour cloning of one run by this recipe (a PilotNet run takes UDACITY_FIELDS)."""
        common: dict[str, Any] = dict(data=[demos], out=out, task=task, head=head, epochs=self.epochs, lr=self.lr, ema=self.ema, batch_size=self.batch_size,
                                      val_fraction=self.val_fraction, seed=seed, device=device)
        if task == "udacity":
            return TrainConfig(**common, net=dict(self.net))
        return TrainConfig(**common, window=self.window, **frame_gaps(head, continuous, self.stride_jitter, self.regular_share), shift=self.shift, augment=self.augment,
                           arrival_windows=self.arrival_windows,
                           select_episodes=self.select_episodes, select_steps=max_steps, loss=self.loss, balance=self.balance, turn_weight=self.turn_weight,
                           net={"use_time": True, **self.net})

    def dagger_config(self, run: str, expert: str, seed: int, max_steps: int = EPISODE_STEPS) -> DaggerConfig:
        """This recipe's DAgger rounds after the behaviour cloning of one run (one rollout process)."""
        return DaggerConfig(run=run, expert=expert, rounds=self.dagger_rounds, until=self.dagger_until, check=self.dagger_check, max_rounds=self.dagger_max_rounds, episodes=self.dagger_episodes, beta=self.dagger_beta,
                            epochs=self.dagger_epochs, average=self.dagger_average, workers=1, max_steps=max_steps, off_road_steps=self.dagger_off_road,
                            takeover=self.dagger_takeover, perturb=self.dagger_perturb, seed_start=FIRST_SEED + seed * 1000)  # each training seed has its own rollouts


# Recipe's defaults until study.json stored each variant's whole recipe: what the runs of a study
# written before then were trained by, whatever the defaults are now
LEGACY_RECIPE: dict[str, Any] = {
    "epochs": 4, "dagger_rounds": 2, "dagger_episodes": 10, "dagger_epochs": 2, "dagger_beta": 0.5, "dagger_off_road": 0, "dagger_perturb": "none", "arrival_windows": False, "window": 8,
    "stride_jitter": 1, "regular_share": 0.0, "shift": 0, "select_episodes": 0, "lr": 1e-4, "ema": 0.0, "batch_size": 32, "loss": "mse",
    "balance": "auto", "val_fraction": 0.2, "noise": 0.0, "net": {},
}


# Recipe fields added after studies began storing whole recipes, with the value that means what a stored recipe
# without them was trained by (a field whose default is not the old behaviour must be named here), or a function of the
# stored recipe giving it: DAgger's check changed what dagger_until judges, and means nothing without it, so a study that
# never used until continues under today's default
ADDED_FIELDS: dict[str, Any] = {"dagger_perturb": "none", "arrival_windows": False, "augment": "none",
                                "dagger_check": lambda recipe: 0 if recipe.get("dagger_until") else DaggerConfig.check}


def parse_variant(text: str) -> tuple[str, dict[str, Any]]:
    """'bc:dagger_rounds=0' -> ("bc", {"dagger_rounds": 0}); 'euler:net.nac.mode=euler' sets a
    nested network option; values are JSON where they parse ('true', '3'), text otherwise."""
    name, _, spec = text.partition(":")
    need(bool(name) and name.replace("-", "").replace("_", "").isalnum(), f"a variant is NAME[:KEY=VALUE,...] with a plain name (got {text!r})")
    overrides: dict[str, Any] = {}
    for item in filter(None, spec.split(",")):
        key, sep, raw = item.partition("=")
        need(bool(sep and key), f"variant {name!r}: expected KEY=VALUE, got {item!r}")
        try:
            value = json.loads(raw)
        except json.JSONDecodeError:
            value = raw
        *path, last = key.split(".")
        allowed = [f.name for f in fields(Recipe)]
        need(path[:1] == ["net"] or (not path and key in allowed), f"variant {name!r}: unknown recipe field {key!r}; allowed: {allowed} (net.* for network options)")
        node = overrides
        for part in path:
            node = node.setdefault(part, {})
        node[last] = value
    Recipe.from_dict(overrides)  # check the values now, with the recipe's own messages
    return name, overrides
