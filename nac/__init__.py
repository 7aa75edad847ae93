"""NAC: the Neuronal Attention Circuit and the sequence heads it is compared with."""

from nac.layer import NAC, ConfigError, NACConfig, NACDetails
from nac.ode import solve

__all__ = ["NAC", "NACConfig", "NACDetails", "ConfigError", "solve"]
