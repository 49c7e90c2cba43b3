"""The config model (`SmartSearchConfig` and its parts) and its validation errors."""

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
