"""How a policy is trained, declared once: the recipe's fields (behaviour cloning, then DAgger rounds) and the
named presets every job starts from. A newcomer reads this module to learn what a run does.

- `full`: the recipe of the policies shipped before the contrast input, and of a study's default
  variant: 50 demonstrations, 4 epochs of behaviour cloning, 2 DAgger rounds of 10 rollouts and 2 epochs each.
- `quickstart`: the quick start, continuous actions: the full recipe's data and rounds in two fifths of its training
  steps at a 3x learning rate, and up to two extra DAgger rounds for a draw whose last round falls short
  (docs/studies/quickstart-10min/, docs/studies/discrete-heads/).
- `full-randmix`: the full recipe with random convolution mixed with the identity on half the chunks (`augment=randmix`)
  and, like the quick start, up to two extra DAgger rounds for a run whose check falls short: the recipe chosen against
  unseen scenes before the contrast input (docs/studies/augment-runs/).
- `full-contrast`: `full-randmix` with the frame's colour contrast as a fourth channel, measured from the patch just
  ahead of the car and scaled to the scene (`net.frame_input=rgb+contrast-scaled`, `net.contrast_from=ahead`): the
  recipe chosen against unseen scenes (docs/studies/augment-contrast/).
- `full-contrast-jitter`: `full-contrast` with a quarter of the training frames' contrast measured from a patch at a
  random place in the scene (`net.contrast_jitter=0.25`), so that every run learns to steer with the patch ahead on the
  grass: chosen against weak runs over `full-contrast` (docs/studies/contrast-reference/).
- `full-contrast-jitter-retrain`: `full-contrast-jitter`, and a finished run whose weights drive the 50 selection tracks
  below 900 is trained again under another training seed, up to 3 attempts in all, keeping the attempt that drove them
  best (agents.training.retrain): the guard against the weak run that every recipe here has given about one time in ten,
  every one of its ten validation runs >= 900 (docs/studies/contrast-reference/); the final comparison of heads trains by
  it.
- `quickstart-discrete`: the quick start with 5 discrete actions: the network learns the front-wheel angle the
  planning expert aims at and its target speed (docs/studies/discrete-heads/).

The shipped CarRacing policies (agents/pretrained/README.md) are `full-contrast-jitter-retrain` for their head
(training seed 0 of the final grid, docs/studies/final-grid/), but `nac-mix` and `nac-mix-notime`: `full` with
dagger_perturb=none (and net.use_time=false for the second), trained before the perturbed rollouts were the default.

A job's recipe is a preset plus overrides: `nacdrive quickstart --lr 1e-4`, a study's `--variant NAME:KEY=VALUE`
(and `preset=NAME`). What depends on the head or the action space (DAgger's beta, the windows' frame gaps: the same for
every head) is resolved where the run is trained (agents.training.dagger_config.recipe_beta, agents.training.bc.frame_gaps),
unless the recipe gives it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from agents.carracing.env import EPISODE_STEPS
from agents.training.bc import frame_gaps
from agents.training.collect import DemosRecipe
from agents.training.dagger_config import FIRST_SEED, DaggerConfig, DaggerRecipe
from agents.training.loop import DEFAULT_EPOCHS, CloningRecipe, TrainConfig
from agents.training.retrain import RetrainRecipe
from nac.config import ConfigDict, ConfigError, need

# The recipe's parts and the prefix of their fields' flat names (the flags, a study's variant keys, the presets below):
# DAgger's rounds are dagger_rounds, behaviour cloning's learning rate is lr
PARTS = {"bc": "", "dagger": "dagger_", "demos": "", "retrain": "retrain_"}
PART_CONFIGS = {"bc": CloningRecipe, "dagger": DaggerRecipe, "demos": DemosRecipe, "retrain": RetrainRecipe}
PART_LABELS = {"dagger": "the DAgger rounds' ", "retrain": "the retrain guard's "}  # what an error in a part's field begins with
RENAMED = {"dagger_off_road": "dagger_off_road_steps"}  # flat names of older versions -> today's


@dataclass
class Recipe(ConfigDict):
    """How one run is trained: demonstrations recorded so, behaviour cloning on them, then DAgger rounds, and again under
    another seed if the run drives poorly. It holds the three jobs' own recipe configs (collect's DemosRecipe, train's
    CloningRecipe, dagger's DaggerRecipe) and the guard's (RetrainRecipe, applied by agents.training.retrain.train_attempts),
    so that a recipe field is declared once, in its job's config; the defaults are the full recipe."""

    WHAT = "recipe parts"

    bc: CloningRecipe = field(default_factory=lambda: CloningRecipe(epochs=DEFAULT_EPOCHS["carracing"]),
                              metadata={"prefix": PARTS["bc"]})  # behaviour cloning on the demonstrations
    dagger: DaggerRecipe = field(default_factory=DaggerRecipe, metadata={"prefix": PARTS["dagger"]})  # the DAgger rounds after
    # it (dagger_rounds 0: behaviour cloning alone)
    demos: DemosRecipe = field(default_factory=DemosRecipe, metadata={"prefix": PARTS["demos"]})  # how the demonstrations are recorded
    retrain: RetrainRecipe = field(default_factory=RetrainRecipe, metadata={"prefix": PARTS["retrain"]})  # whether a finished run
    # that drives its selection tracks poorly is trained again (agents.training.retrain; default: never)

    def __post_init__(self) -> None:
        for name, part in PART_CONFIGS.items():
            value = getattr(self, name)
            if isinstance(value, dict):  # as stored in JSON
                try:
                    setattr(self, name, part.from_dict(value))
                except ConfigError as e:
                    raise ConfigError(PART_LABELS.get(name, "") + str(e)) from None

    @staticmethod
    def names() -> dict[str, tuple[str, str]]:
        """{flat name: (part, field)}: every recipe field by the name the flags, variants and presets give it."""
        return {PARTS[part] + f.name: (part, f.name) for part, cls in PART_CONFIGS.items() for f in fields(cls)}

    @classmethod
    def flatten(cls, data: dict[str, Any]) -> dict[str, Any]:
        """A recipe or overrides of one, nested by part (as to_dict and study.json write them) or by flat names (flags,
        variants, presets; and every recipe older versions stored), as flat names. The one reader of older spellings."""
        flat: dict[str, Any] = {}
        for key, value in data.items():
            if key in PARTS and isinstance(value, dict):
                flat.update({PARTS[key] + k: v for k, v in value.items()})
            else:
                flat[RENAMED.get(key, key)] = value
        return flat

    @classmethod
    def from_flat(cls, flat: dict[str, Any]) -> "Recipe":
        names = cls.names()
        unknown = sorted(set(flat) - set(names))
        need(not unknown, f"unknown recipe fields {unknown}; allowed: {sorted(names)}")
        parts = cls().to_dict()  # the defaults are the parts' own (the recipe's 4 epochs of behaviour cloning)
        for key, value in flat.items():
            part, name = names[key]
            parts[part][name] = value
        return cls(**parts)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Recipe":
        return cls.from_flat(cls.flatten(data))

    def flat(self) -> dict[str, Any]:
        return self.flatten(self.to_dict())

    def changed(self, **flat: Any) -> "Recipe":
        """This recipe with these flat-named fields changed."""
        return Recipe.from_flat({**self.flat(), **flat})

    def train_config(self, demos: str, out: str, head: str, seed: int, task: str = "carracing", max_steps: int = EPISODE_STEPS, device: str = "auto",
                     continuous: bool = True) -> TrainConfig:
        """The behaviour cloning of one run by this recipe (a PilotNet run takes UDACITY_FIELDS alone), the frame gaps
        resolved for the action space."""
        given = self.bc.to_dict()
        common: dict[str, Any] = dict(data=[demos], out=out, task=task, head=head, seed=seed, device=device)
        if task == "udacity":
            return TrainConfig(**common, **{k: v for k, v in given.items() if k in UDACITY_FIELDS})
        given.update(frame_gaps(continuous, self.bc.stride_jitter, self.bc.regular_share), select_steps=max_steps,
                     net={"use_time": True, **self.bc.net})
        return TrainConfig(**common, **given)

    def dagger_config(self, run: str, expert: str, seed: int, max_steps: int = EPISODE_STEPS, workers: int = 1) -> DaggerConfig:
        """This recipe's DAgger rounds after the behaviour cloning of one run; each training seed has its own rollout seeds."""
        try:
            return DaggerConfig(run=run, expert=expert, workers=workers, max_steps=max_steps, seed_start=FIRST_SEED + seed * 1000,
                                **self.dagger.to_dict())
        except ConfigError as e:
            raise ConfigError(f"the DAgger rounds' {e}") from None


# fields whose None is resolved where the run is trained (dagger_beta for the head and action space, the frame gaps for
# the action space); a report shows it as "default"
RESOLVED_AT_TRAINING = ("dagger_beta", "stride_jitter", "regular_share")
UDACITY_FIELDS = {"epochs", "minutes", "lr", "ema", "batch_size", "val_fraction", "net", "noise"}  # the fields a PilotNet run has
# (no DAgger, no windows; net.speed_output=true: a learned speed)


@dataclass(frozen=True)
class Preset:
    demos: int  # expert demonstrations the recipe is trained on
    recipe: dict[str, Any]  # overrides of Recipe's defaults


WHEEL_TARGET = {"net": {"wheel_target": True, "wheel_speed": "target"}, "balance": "weights"}  # discrete: learn the planned
# wheel angle and the expert's target speed, the speed excess's error weighted by brake / no brake

EXTRA_ROUNDS = {"dagger_until": 880.0, "dagger_max_rounds": 4}  # up to two extra DAgger rounds for a run whose last check
# falls short of 880 (the quick start's, and full-randmix's)
RANDMIX = {"augment": "randmix", **EXTRA_ROUNDS}  # the full recipe's steps under randmix (full-randmix)
AHEAD_CONTRAST = {"net": {"frame_input": "rgb+contrast-scaled", "contrast_from": "ahead"}}  # the frame and its colour
# contrast from the patch ahead of the car, scaled to the scene (full-contrast)
JITTERED_CONTRAST = {"net": {**AHEAD_CONTRAST["net"], "contrast_jitter": 0.25}}  # the same, with a quarter of the training
# frames' contrast measured from a patch at a random place (full-contrast-jitter)
RETRAIN = {"retrain_below": 900.0}  # a finished run whose weights drive the 50 selection tracks below 900 is trained again under
# another seed, up to 3 attempts, keeping the one that drove them best (full-contrast-jitter-retrain)

PRESETS: dict[str, Preset] = {
    "full": Preset(demos=50, recipe={}),
    "full-randmix": Preset(demos=50, recipe=RANDMIX),
    "full-contrast": Preset(demos=50, recipe={**RANDMIX, **AHEAD_CONTRAST}),
    "full-contrast-jitter": Preset(demos=50, recipe={**RANDMIX, **JITTERED_CONTRAST}),
    "full-contrast-jitter-retrain": Preset(demos=50, recipe={**RANDMIX, **JITTERED_CONTRAST, **RETRAIN}),
    "quickstart": Preset(demos=50, recipe={"epochs": 1, "dagger_epochs": 1, "lr": 3e-4, "dagger_beta": 0.3, **EXTRA_ROUNDS}),
    "quickstart-discrete": Preset(demos=30, recipe={"epochs": 6, "dagger_epochs": 2, "lr": 1e-4, "dagger_beta": 0.5, "dagger_until": 880.0,
                                                    "dagger_max_rounds": 3, "dagger_average": 3, **WHEEL_TARGET}),
}


def check_preset(name: str) -> Preset:
    need(name in PRESETS, f"unknown recipe preset {name!r}; choose from {', '.join(PRESETS)}")
    return PRESETS[name]


def preset_recipe(name: str, overrides: dict[str, Any] | None = None) -> Recipe:
    """The preset's recipe with the overrides (flat names or nested by part; network options merge into the preset's). A preset that allows extra
    DAgger rounds keeps as many extra when the overrides change its rounds and not its most rounds."""
    base, overrides = check_preset(name).recipe, Recipe.flatten(overrides or {})
    if "dagger_rounds" in overrides and "dagger_max_rounds" not in overrides and base.get("dagger_max_rounds"):
        extra = base["dagger_max_rounds"] - base.get("dagger_rounds", DaggerRecipe.rounds)
        overrides["dagger_max_rounds"] = overrides["dagger_rounds"] + extra
    net = {**base.get("net", {}), **overrides.get("net", {})}  # a network option merges into the preset's
    return Recipe.from_flat({**base, **overrides, **({"net": net} if net else {})})
