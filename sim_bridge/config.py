"""What the bridge and the stand-in simulator are configured by, apart from their servers and clients, so that the
command line reads them without loading socket.io."""

from __future__ import annotations

from dataclasses import dataclass

from agents.carracing.scenarios import CLEAN, check_scenario
from agents.training.udacity import TURN_SLOWDOWN
from nac.config import need

CONNECT_WAIT = 10.0  # seconds the simulator's client keeps trying to reach a server that is not up yet


@dataclass
class BridgeConfig:
    host: str = "127.0.0.1"  # the address to listen on: the simulator connects to 127.0.0.1; other addresses only on purpose
    port: int = 4567  # the port, where the simulator connects
    speed: float | None = None  # target speed in mph (the simulator's top speed is about 30; default: the speed the run
    # predicts for each frame if it was trained with --speed-output, else 20, lowered in sharp turns)
    max_steer: float = 1.0  # steering commands are clipped to [-max_steer, max_steer]
    turn_slowdown: float = TURN_SLOWDOWN  # with a fixed speed: the target drops by this share at full steering lock, in proportion
    # below it (0: the same speed in bends)
    record: str | None = None  # record frames and driving_log.csv (the simulator's format) into this new folder
    status_every: float = 1.0  # seconds between status lines (0: none)

    def __post_init__(self) -> None:
        need(0 < self.port < 65536, f"port must be 1..65535 (got {self.port})")
        need(self.speed is None or 0 < self.speed <= 40, f"speed must be in (0, 40] mph (got {self.speed})")
        need(0 < self.max_steer <= 1, f"max steer must be in (0, 1] (got {self.max_steer})")
        need(0 <= self.turn_slowdown < 1, f"turn slowdown must be in [0, 1) (got {self.turn_slowdown})")


@dataclass
class SimConfig:
    host: str = "127.0.0.1"  # the bridge's address ('nacdrive drive')
    port: int = 4567  # the bridge's port
    seed: int = 20000  # the first track seed
    episodes: int = 1  # episodes, on consecutive seeds
    max_steps: int = 1000  # steps per episode
    record: str | None = None  # training mode: the expert drives, and the drive is recorded into this new folder (frames +
    # driving_log.csv, ready for 'nacdrive train --task udacity'); without it, autonomous mode: the bridge drives
    noise: float = 0.0  # training mode: std of a slowly varying offset added to the steering the car executes, never to
    # the label (DART, Laskey et al. 2017): the car drifts off the line and the recording shows the expert bringing it back
    policy_share: float = 0.0  # training mode: each step, with this probability the car executes the reply of the bridge at
    # host:port (a trained policy driving, as in DAgger, Ross et al. 2011) instead of the expert's action; the label stays the
    # expert's, so the recording shows what to do in the places the policy drives itself into
    scenario: str = CLEAN  # what the camera shows (agents.carracing.scenarios; a generalization test of a PilotNet run)
    wait: float = CONNECT_WAIT  # seconds to keep trying to reach the bridge before giving up, as the simulator's client
    # does when it starts before the server

    def __post_init__(self) -> None:
        check_scenario(self.scenario)
        need(self.wait > 0, f"wait must be > 0 seconds (got {self.wait})")
        need(0 < self.port < 65536, f"port must be 1..65535 (got {self.port})")
        need(self.episodes >= 1 and self.max_steps >= 1, "episodes and max-steps must be >= 1")
        need(0.0 <= self.noise <= 1.0, f"noise must be in [0, 1] (got {self.noise})")
        need(0.0 <= self.policy_share <= 1.0, f"policy share must be in [0, 1] (got {self.policy_share})")
        need(not (self.policy_share and self.noise), "give --noise or --policy-share, not both (one way to leave the expert's line at a time)")
        need(self.record is not None or not (self.policy_share or self.noise), "--noise and --policy-share are for training mode (--record DIR)")
