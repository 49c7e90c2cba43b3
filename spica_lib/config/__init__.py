"""The config a user writes (`SmartSearchConfig` and its parts), its shared field names, presets and
trace checks, and the validate and policies stages."""

from spica_lib.config.goal import OptimizationGoal, OptimizationTarget, SLATarget
from spica_lib.config.root import SmartSearchConfig
from spica_lib.config.search_space import SearchSpace
from spica_lib.config.strict import ConfigError
from spica_lib.config.sweep import SweepConfig
from spica_lib.config.workload import Workload

__all__ = [
    "ConfigError",
    "OptimizationGoal",
    "OptimizationTarget",
    "SLATarget",
    "SearchSpace",
    "SmartSearchConfig",
    "SweepConfig",
    "Workload",
]
