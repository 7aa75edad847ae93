"""How a policy is trained, declared once: the recipe's fields (behaviour cloning, then DAgger rounds) and the
named presets every job starts from. A newcomer reads this module to learn what a run does.

- `full`: the recipe of every shipped CarRacing policy (agents/pretrained/README.md) and of a study's default
  variant: 50 demonstrations, 4 epochs of behaviour cloning, 2 DAgger rounds of 10 rollouts and 2 epochs each.
- `quickstart`: the quick start, continuous actions: the full recipe's data and rounds in two fifths of its training
  steps at a 3x learning rate, and up to two extra DAgger rounds for a draw whose last round falls short
  (docs/studies/quickstart-10min/, docs/studies/discrete-heads/).
- `quickstart-discrete`: the quick start with 5 discrete actions: the network learns the front-wheel angle the
  planning expert aims at and its target speed (docs/studies/discrete-heads/).

The shipped CarRacing policies (agents/pretrained/README.md) are `full` for their head: `nac` as it is (training seed 3),
`lstm`, `gru`, `cfc`, `mha`, `mha-rope` with dagger_perturb=none (trained before the perturbed rollouts were the default),
`nac-mix` with dagger_perturb=none, and `nac-mix-notime` with dagger_perturb=none and net.use_time=false.

A job's recipe is a preset plus overrides: `nacdrive quickstart --lr 1e-4`, a study's `--variant NAME:KEY=VALUE`
(and `preset=NAME`). What depends on the head (DAgger's beta, the windows' frame gaps) is resolved where the run is
trained, from the head and the action space (agents.training.dagger.recipe_beta, agents.training.bc.frame_gaps),
unless the recipe gives it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from agents.carracing.env import EPISODE_STEPS
from agents.training.bc import frame_gaps
from agents.training.collect import CollectConfig
from agents.training.dagger import FIRST_SEED, DaggerConfig
from agents.training.loop import DEFAULT_EPOCHS, TrainConfig
from nac.config import ConfigDict, ConfigError, need

T, D = TrainConfig, DaggerConfig  # the recipe's defaults are the components' own


def like(cls: type, name: str) -> Any:
    """A recipe field declared as the component's field of that name: its default and its choices."""
    f = cls.__dataclass_fields__[name]  # type: ignore[attr-defined]
    return field(default=f.default, metadata=f.metadata)


@dataclass
class Recipe(ConfigDict):
    """How one run is trained: behaviour cloning on the demonstrations, then DAgger rounds. The defaults are the full
    recipe; each field is the training's or DAgger's option of the same name (train --X, dagger --X)."""

    WHAT = "recipe fields"

    epochs: int = DEFAULT_EPOCHS["carracing"]  # behaviour-cloning epochs on the demonstrations
    minutes: float | None = T.minutes  # also stop behaviour cloning after this many minutes (a cap makes the result depend on
    # the machine's speed)
    dagger_rounds: int = D.rounds  # DAgger rounds after it (0: pure behaviour cloning)
    dagger_until: float = D.until  # > 0: then one more round while the last round's rollouts or trained weights average below
    # this return or lose a track (dagger --until) ...
    dagger_check: int = D.check  # ... judged on this many episodes its weights drive alone (dagger --check; 0: the rollouts) ...
    dagger_max_rounds: int = D.max_rounds  # ... up to this many rounds in all (dagger --max-rounds)
    dagger_episodes: int = D.episodes  # policy rollouts per round, labelled by the expert
    dagger_bend: float = D.bend  # > 0: the rollouts only on tracks with a bend of at least this many degrees (dagger --bend)
    dagger_epochs: int = D.epochs  # training epochs after each round
    dagger_minutes: float | None = D.minutes  # also stop each round's training after this many minutes
    dagger_average: int = D.average  # > 1: the run's weights are the mean of its last K rounds' own, from round 2 on (dagger --average)
    dagger_select: str = like(D, "select")  # check: the run's weights are the round's own that drove dagger_check episodes best (dagger --select)
    dagger_beta: float | None = D.beta  # round r executes the expert's action with probability beta ** r (default: the
    # recipe's for the head and action space, agents.training.dagger.recipe_beta)
    dagger_off_road: int = D.off_road_steps  # > 0: a rollout ends once the car has been off the road this many steps in a row
    dagger_takeover: float = D.takeover  # > 0: the expert takes over a rollout while the car is this many u/s too fast or
    # off the road (dagger --takeover)
    dagger_perturb: str = D.perturb  # the policy drives half the rollouts under this perturbation (dagger --perturb; auto: the
    # run's own frame gaps)
    window: int = T.window  # frames per window
    stride_jitter: int | None = T.stride_jitter  # > 1: windows with irregular frame gaps 1..J (true timestamps kept) ...
    regular_share: float | None = T.regular_share  # ... except this share of them (default: the recipe's for the head,
    # agents.training.bc.frame_gaps)
    arrival_windows: bool = T.arrival_windows  # rollout steps a perturbed policy decided on train on the windows it saw
    shift: int = T.shift  # random image shifts of up to this many pixels (train --shift)
    augment: str = like(T, "augment")  # an augmentation against visual shift (train --augment: jitter, randconv, overlay)
    select_episodes: int = T.select_episodes  # > 0: best weights by closed-loop return over this many episodes
    lr: float = T.lr  # Adam's learning rate, behaviour cloning and DAgger rounds alike
    ema: float = T.ema  # > 0: keep and judge a moving average of the weights, this decay per step (train --ema)
    batch_size: int = T.batch_size  # windows per training step
    loss: str = like(T, "loss")  # continuous actions: mse or l1 (train --loss)
    balance: str = like(T, "balance")  # class imbalance (train --balance)
    turn_weight: float = T.turn_weight  # wheel-angle networks: the angle's error weighted where the expert's plan turns fast
    val_fraction: float = T.val_fraction  # share of the demonstrations held out for validation
    noise: float = CollectConfig.noise  # DART: std of the steering drift in the demonstrations (collect --noise)
    net: dict[str, Any] = field(default_factory=dict)  # network options, e.g. {"use_time": false, "nac": {"mode": "euler"}}

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
        """The behaviour cloning of one run by this recipe: its fields named as TrainConfig's (a PilotNet run takes
        UDACITY_FIELDS alone), the frame gaps resolved for the head and action space."""
        given = {name: getattr(self, name) for name in TRAIN_FIELDS} | {"net": dict(self.net)}
        common: dict[str, Any] = dict(data=[demos], out=out, task=task, head=head, seed=seed, device=device)
        if task == "udacity":
            return TrainConfig(**common, **{k: v for k, v in given.items() if k in UDACITY_FIELDS})
        given.update(frame_gaps(head, continuous, self.stride_jitter, self.regular_share), select_steps=max_steps, net={"use_time": True, **self.net})
        return TrainConfig(**common, **given)

    def dagger_config(self, run: str, expert: str, seed: int, max_steps: int = EPISODE_STEPS, workers: int = 1) -> DaggerConfig:
        """This recipe's DAgger rounds after the behaviour cloning of one run: its dagger_* fields; each training seed has
        its own rollout seeds."""
        given = {DAGGER_NAMES.get(name, name.removeprefix("dagger_")): getattr(self, name) for name in RECIPE_FIELDS if name.startswith("dagger_")}
        return DaggerConfig(run=run, expert=expert, workers=workers, max_steps=max_steps, seed_start=FIRST_SEED + seed * 1000, **given)


RECIPE_FIELDS = [f.name for f in fields(Recipe)]
TRAIN_FIELDS = [name for name in RECIPE_FIELDS if name in TrainConfig.__dataclass_fields__]  # the behaviour cloning's
DAGGER_NAMES = {"dagger_off_road": "off_road_steps"}  # dagger_X is DaggerConfig's X, but for this one
BY_HEAD = ("dagger_beta", "stride_jitter", "regular_share")  # fields whose None is resolved for the head and action space
UDACITY_FIELDS = {"epochs", "minutes", "lr", "ema", "batch_size", "val_fraction", "net", "noise"}  # the fields a PilotNet run has
# (no DAgger, no windows; net.speed_output=true: a learned speed)


@dataclass(frozen=True)
class Preset:
    demos: int  # expert demonstrations the recipe is trained on
    recipe: dict[str, Any]  # overrides of Recipe's defaults


WHEEL_TARGET = {"net": {"wheel_target": True, "wheel_speed": "target"}, "balance": "weights"}  # discrete: learn the planned
# wheel angle and the expert's target speed, the speed excess's error weighted by brake / no brake

PRESETS: dict[str, Preset] = {
    "full": Preset(demos=50, recipe={}),
    "quickstart": Preset(demos=50, recipe={"epochs": 1, "dagger_epochs": 1, "lr": 3e-4, "dagger_beta": 0.3, "dagger_until": 880.0,
                                           "dagger_max_rounds": 4}),
    "quickstart-discrete": Preset(demos=30, recipe={"epochs": 6, "dagger_epochs": 2, "lr": 1e-4, "dagger_beta": 0.5, "dagger_until": 880.0,
                                                    "dagger_max_rounds": 3, "dagger_average": 3, **WHEEL_TARGET}),
}


def check_preset(name: str) -> Preset:
    need(name in PRESETS, f"unknown recipe preset {name!r}; choose from {', '.join(PRESETS)}")
    return PRESETS[name]


def preset_recipe(name: str, overrides: dict[str, Any] | None = None) -> Recipe:
    """The preset's recipe with the overrides (network options merge into the preset's). A preset that allows extra
    DAgger rounds keeps as many extra when the overrides change its rounds and not its most rounds."""
    base, overrides = check_preset(name).recipe, dict(overrides or {})
    if "dagger_rounds" in overrides and "dagger_max_rounds" not in overrides and base.get("dagger_max_rounds"):
        extra = base["dagger_max_rounds"] - base.get("dagger_rounds", Recipe.dagger_rounds)
        overrides["dagger_max_rounds"] = overrides["dagger_rounds"] + extra
    net = {**base.get("net", {}), **overrides.get("net", {})}  # a network option merges into the preset's
    return Recipe.from_dict({**base, **overrides, **({"net": net} if net else {})})
