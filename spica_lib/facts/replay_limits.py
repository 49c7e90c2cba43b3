"""What the pinned Dynamo replay cannot run, in one place.

Each limit was found by replaying the case on the installed ai-dynamo and is written down with the
version it was found on; `tests/test_replay_support.py` replays every one of them again, so an
upgrade that lifts a limit fails that test and the limit can go. Pools apply these limits when they
are built (pools/build.py, pools/branches.py), so no suggestion, warm-start seed, refill or baseline
lands on a layout the replay refuses.

Not here, because it is not a refusal: a KV router with one routing target per role is replayed as
round robin (trial/evaluate.py), as there is nothing for it to choose.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from spica_lib.facts.parallel import DisaggConfig, ParallelConfig, role_configs

FOUND_ON = "1.5.1"  # the ai-dynamo version every limit below was found on (requirements/lock.txt pins it)

# A mode the replay refuses for a backend, whatever the layout.
MODE_LIMITS: dict[tuple[str, str], str] = {
    ("disagg", "trtllm"): f"ai-dynamo {FOUND_ON}'s replay does not support TRT-LLM disaggregation",
}

DISAGG_ATTENTION_DP = (
    f"attention DP in a role, which ai-dynamo {FOUND_ON}'s offline disaggregated replay does not simulate "
    "(it refuses prefill or decode dp_size > 1)"
)


class ReplayLimited(BaseModel):
    """Layouts of one mode and backend left out of a pool because the replay cannot run them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: str
    reason: str
    layouts: int  # how many enumerated layouts the limit removed
    enumerated: int  # of how many the mode enumerated for this backend

    def line(self, mode: str) -> str:
        return (
            f"{mode}/{self.backend}: {self.layouts} of {self.enumerated} enumerated layouts left out, "
            f"as they use {self.reason}"
        )


def mode_limit(mode: str, backend: str) -> str | None:
    """Why the replay cannot run this backend in this mode at all, or None."""
    return MODE_LIMITS.get((mode, backend))


def layout_limit(config: ParallelConfig) -> str | None:
    """Why the replay cannot run this layout (whatever the backend), or None."""
    if isinstance(config, DisaggConfig):
        if any(replica.shape.attention_dp > 1 for replica in role_configs(config).values()):
            return DISAGG_ATTENTION_DP
    return None


def split_replayable(
    configs: list[ParallelConfig], backend: str
) -> tuple[list[ParallelConfig], list[ReplayLimited]]:
    """The layouts the replay can run, and a count per reason of those it cannot."""
    kept: list[ParallelConfig] = []
    counts: dict[str, int] = {}
    for config in configs:
        reason = layout_limit(config)
        if reason is None:
            kept.append(config)
        else:
            counts[reason] = counts.get(reason, 0) + 1
    limited = [
        ReplayLimited(backend=backend, reason=reason, layouts=n, enumerated=len(configs))
        for reason, n in counts.items()
    ]
    return kept, limited


# Substrings of a replay error that name a property of the layout (the same layout fails the same way
# under any other knob), as opposed to a crash of one run. Found on ai-dynamo FOUND_ON.
LAYOUT_REFUSALS = (
    "does not support",  # "offline disaggregated replay does not support attention DP", "... TRT-LLM"
    "unsupported model/backend/GPU",  # aiconfigurator's KV estimate refusing a parallel width
    "Parallelism width mismatch",
)


def is_layout_refusal(reason: str | None) -> bool:
    """Whether a failed replay's reason says the layout itself cannot be replayed."""
    return bool(reason) and any(fragment in reason for fragment in LAYOUT_REFUSALS)
