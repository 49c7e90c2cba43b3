"""The config a user writes (`SmartSearchConfig` and its parts), its shared field names, presets and
trace checks, and the validate and policies stages.

Which kind of document a file is (a sweep, a fleet, a DGDR) is `read_input`'s answer. A config built on this
one (fleet/'s, of several models) reads its file with `read_yaml_mapping` and puts in `DEFAULT_CAPACITY_TOP`
where it needs a capacity the single config would not bisect.
"""

from spica_lib.config.goal import OptimizationGoal, OptimizationTarget, SLATarget
from spica_lib.config.input_kind import InputKind, read_input, read_yaml_mapping
from spica_lib.config.root import DEFAULT_CAPACITY_TOP, SmartSearchConfig
from spica_lib.config.search_space import SearchSpace
from spica_lib.config.strict import ConfigError
from spica_lib.config.sweep import SweepConfig
from spica_lib.config.workload import Workload

__all__ = [
    "DEFAULT_CAPACITY_TOP",
    "ConfigError",
    "InputKind",
    "OptimizationGoal",
    "OptimizationTarget",
    "SLATarget",
    "SearchSpace",
    "SmartSearchConfig",
    "SweepConfig",
    "Workload",
    "read_input",
    "read_yaml_mapping",
]
