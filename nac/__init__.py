"""NAC: the Neuronal Attention Circuit and the sequence heads it is compared with."""

from nac.config import ConfigError
from nac.layer import NAC, NACConfig, NACDetails
from nac.ode import solve

__all__ = ["NAC", "NACConfig", "NACDetails", "ConfigError", "solve"]
