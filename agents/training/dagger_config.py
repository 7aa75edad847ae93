"""The DAgger config: the recipe's part (DaggerRecipe: rounds, their rollouts and training) and a DAgger run's
(DaggerConfig: the run, the expert, where its rollouts drive), with the recipe's beta for a head."""

from __future__ import annotations

from dataclasses import dataclass, field

from agents.carracing.seeds import DAGGER_SEED
from agents.experts import EXPERTS, check_expert
from agents.driving.executor import storage_path
from agents.carracing import perturb as perturbations
from agents.driving.rollout import Rollouts
from nac.config import ConfigDict, ConfigError, above, at_least, between, check_ranges, need


FIRST_SEED = DAGGER_SEED  # DAgger rollouts use seeds from here on (agents.carracing.seeds)
SELECTS = ("last", "check", "drive")  # DaggerConfig.select


@dataclass
class DaggerRecipe(ConfigDict):
    """How the DAgger rounds after behaviour cloning go: the recipe's part of a DAgger run (agents.training.recipe.Recipe holds
    one; DaggerConfig is one, with the run, the expert and where the rollouts drive)."""

    WHAT = "DAgger fields"

    rounds: int = 2  # rounds of rollouts and training (the recipe's two)
    until: float = 0.0  # > 0: after `rounds`, one more round while the last round falls short, up to max_rounds in all: its clean
    # rollouts' mean return below this, or its trained weights, driving `check` episodes alone, below it or losing a track
    # (reaching fewer than 95 % of its tiles). The extra rounds go only to a run that needs them; 0: exactly `rounds`
    check: int = 16  # with until: the episodes each round's trained weights drive alone (check seeds, the same every round, apart
    # from evaluation's). Failures are rare, so each episode is judged, not only the mean; 0: judge the round's own clean rollouts
    max_rounds: int = 0  # with until: the most rounds in all (more than rounds)
    skips: bool = False  # with until and check: a check episode that skipped a tile (drove past it, never touched it: the way
    # weak runs lose laps, docs/studies/recipe-reliability) also calls another round; the lost-track rule lets such a lap
    # through, and a slow lap on a long track skips no tile
    episodes: int = field(default=10, metadata=at_least(1))  # policy rollouts per round
    beta: float | None = field(default=None, metadata=between(0, 1, hi_open=True))  # round r executes the expert's action with probability beta ** r (0: the policy drives alone).
    # Default: the recipe's for the run's head and action space, 0.5 for NAC and discrete runs, 0.3 for the other heads (recipe_beta)
    epochs: int = field(default=2, metadata=at_least(1))  # training epochs added per round
    average: int = field(default=1, metadata=at_least(1))  # > 1: the weights the run leaves (which an evaluation drives) are the mean of its last K rounds' own best
    # weights, from round 2 on (stochastic weight averaging, Izmailov et al. 2018); each round's rollouts and check are driven
    # by its own weights, kept in RUN/rounds/. 1: the last round's own
    select: str = field(default="last", metadata={"choices": SELECTS})  # the weights the run leaves: last, the last round's own
    # (or their mean, with average); check, the round's own (behaviour cloning's, round 0, included) that drove the `check`
    # episodes best, each round's weights checked once after the last round (a later round wins a tie): DAgger's last round
    # can train weights that drive worse than the round before (docs/studies/generalization, "The runs that lost clean laps");
    # drive, with until: after extra rounds, the weights of the recipe's last planned round or of an extra round, whichever
    # drove `select_episodes` selection tracks (SELECT_SEED..) best (a later round wins a tie), so that an extra round is kept
    # only where it drives better; a run that needed no extra round keeps its last round's, nothing driven. Extra rounds
    # called by one lost check track can leave a run worse than its planned last round (docs/studies/dagger-extra-rounds/)
    select_episodes: int = 50  # with select drive: the selection tracks each candidate round's weights drive
    minutes: float | None = field(default=None, metadata=above(0))  # also stop a round's training after this many minutes
    bend: float = field(default=0.0, metadata=between(0, 180, hi_open=True))  # > 0: the rollouts drive only tracks with a bend of at least this many degrees within 12 segments
    # (agents.carracing.measures.sharpest_bend; 150: hairpins, about one track in six), the next `episodes` of them from seed_start
    # on each round: the policy's own states where it loses tracks, labelled. 0: every track
    off_road_steps: int = 0  # > 0: a rollout ends once all four wheels have been off the road this many steps in a row: the
    # expert's labels for the way back are kept, the frames of a car lost on the grass are not (0: never)
    takeover: float = 0.0  # > 0: the expert also drives while the car is more than this many u/s over the track expert's target
    # speed, has a wheel off the road or has stalled (and 10 steps after), so that with beta 0 the policy drives until it errs
    # and the rollouts record the expert's way out (SafeDAgger-style); 0: no takeover
    perturb: str = "auto"  # the policy drives the rollouts on odd seeds (half of each round's) under this perturbation, as
    # 'evaluate --perturb' takes it (jitter=3: frames arrive 1..3 steps apart); the expert labels every frame, so the data shows
    # the way back from where late or missing frames lead the policy. none: never; auto: the run's own frame gaps, jitter=J for a
    # run trained on gaps of 1..J, none for regular windows

    def __post_init__(self) -> None:
        check_ranges(self)
        need(not self.until or self.max_rounds > self.rounds,
             f"with until, max-rounds (the most rounds in all) must be more than rounds ({self.rounds}; "
             + (f"got {self.max_rounds})" if self.max_rounds else "none given)"))
        need(not self.skips or (self.until and self.check >= 1), f"skips judges the check episodes: it needs until > 0 and check >= 1 "
                                                                 f"(got until {self.until}, check {self.check})")
        need(self.select in SELECTS, f"select must be one of {', '.join(SELECTS)} (got {self.select!r})")
        need(self.select != "check" or (self.check >= 1 and self.average == 1),
             f"select check needs check >= 1 episodes and average 1 (got check {self.check}, average {self.average})")
        need(self.select != "drive" or (self.until > 0 and self.average == 1 and self.select_episodes >= 1),
             f"select drive chooses among the extra rounds: it needs until > 0, average 1 and select episodes >= 1 "
             f"(got until {self.until}, average {self.average}, select episodes {self.select_episodes})")
        if self.perturb not in ("auto", perturbations.CLEAN):
            try:
                perturbations.parse(self.perturb)
            except ConfigError as e:
                raise ConfigError(f"{e}; or auto (the run's own frame gaps)") from None


@dataclass(kw_only=True)
class DaggerConfig(DaggerRecipe, Rollouts):
    """DAgger rounds on a trained run (`nacdrive dagger`): a DAgger recipe (DaggerRecipe's fields) for this run, labelled by
    this expert, its rollouts driven as Rollouts says."""

    run: str  # a run folder from 'nacdrive train'
    expert: str = field(default="track", metadata={"choices": EXPERTS})  # who labels the visited frames
    seed_start: int = FIRST_SEED  # rollout seeds: seed_start + (r - 1) * episodes + i in round r

    def __post_init__(self) -> None:
        check_ranges(self)
        DaggerRecipe.__post_init__(self)
        Rollouts.__post_init__(self)
        self.run = storage_path(self.run, self.ray)
        check_expert(self.expert)  # the name, and for ppo a shipped model, before any rollout
        need(self.rounds >= 1, f"rounds must be >= 1 (got {self.rounds})")


def recipe_beta(head: str, continuous: bool) -> float:
    """DAgger's beta by the recipe, for a run whose recipe gives none (the presets of agents.training.recipe give their own).

    0.3 for continuous runs of the baselines: at 0.5 the attention heads crashed in some runs (docs/studies/mha-rope/,
    'MHA with positions'). 0.5 for the NAC family (so that its ablations share the recipe): at 0.3 its runs lost laps with
    dropped or irregular frames (docs/studies/mha-rope/, 'Perturbed DAgger rollouts'). 0.5 for discrete runs, whose wheel
    recipe drove worse at 0.3 (docs/studies/discrete-brake-weights/)."""
    return 0.5 if not continuous or head.startswith("nac") else 0.3
