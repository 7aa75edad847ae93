"""What the bridge and the stand-in simulator are configured by, apart from their servers and clients, so that the
command line reads them without loading socket.io."""

from __future__ import annotations

from dataclasses import dataclass, field

from agents.carracing.scenarios import CLEAN, check_scenario
from agents.training.udacity import TURN_SLOWDOWN
from nac.config import above, at_least, between, check_ranges, need

CONNECT_WAIT = 10.0  # seconds the simulator's client keeps trying to reach a server that is not up yet


@dataclass
class BridgeConfig:
    host: str = "127.0.0.1"  # the address to listen on: the simulator connects to 127.0.0.1; other addresses only on purpose
    port: int = field(default=4567, metadata=between(1, 65535))  # the port, where the simulator connects
    speed: float | None = field(default=None, metadata=between(0, 40, lo_open=True))  # target speed in mph (the simulator's top speed is about 30; default: the speed the run
    # predicts for each frame if it was trained with --speed-output, else 20, lowered in sharp turns)
    max_steer: float = field(default=1.0, metadata=between(0, 1, lo_open=True))  # steering commands are clipped to [-max_steer, max_steer]
    turn_slowdown: float = field(default=TURN_SLOWDOWN, metadata=between(0, 1, hi_open=True))  # with a fixed speed: the target drops by this share at full steering lock, in proportion
    # below it (0: the same speed in bends)
    record: str | None = None  # record frames and driving_log.csv (the simulator's format) into this new folder
    status_every: float = 1.0  # seconds between status lines (0: none)

    def __post_init__(self) -> None:
        check_ranges(self)


@dataclass
class SimConfig:
    host: str = "127.0.0.1"  # the bridge's address ('nacdrive drive')
    port: int = field(default=4567, metadata=between(1, 65535))  # the bridge's port
    seed: int = 20000  # the first track seed
    episodes: int = field(default=1, metadata=at_least(1))  # episodes, on consecutive seeds
    max_steps: int = field(default=1000, metadata=at_least(1))  # steps per episode
    record: str | None = None  # training mode: the expert drives, and the drive is recorded into this new folder (frames +
    # driving_log.csv, ready for 'nacdrive train --task udacity'); without it, autonomous mode: the bridge drives
    noise: float = field(default=0.0, metadata=between(0, 1))  # training mode: std of a slowly varying offset added to the steering the car executes, never to
    # the label (DART, Laskey et al. 2017): the car drifts off the line and the recording shows the expert bringing it back
    policy_share: float = field(default=0.0, metadata=between(0, 1))  # training mode: each step, with this probability the car executes the reply of the bridge at
    # host:port (a trained policy driving, as in DAgger, Ross et al. 2011) instead of the expert's action; the label stays the
    # expert's, so the recording shows what to do in the places the policy drives itself into
    scenario: str = CLEAN  # what the camera shows (agents.carracing.scenarios; a generalization test of a PilotNet run)
    wait: float = field(default=CONNECT_WAIT, metadata=above(0))  # seconds to keep trying to reach the bridge before giving up, as the simulator's client
    # does when it starts before the server

    def __post_init__(self) -> None:
        check_ranges(self)
        check_scenario(self.scenario)
        need(not (self.policy_share and self.noise), "give --noise or --policy-share, not both (one way to leave the expert's line at a time)")
        need(self.record is not None or not (self.policy_share or self.noise), "--noise and --policy-share are for training mode (--record DIR)")
