"""What a model's checkpoint says about the precisions a replay and the estimates run in.

The replay runs a model in its checkpoint's quantisation, so a measured row of another precision is not
replayed (fidelity/check.py); and SGLang's MLA attention is read from the perf DB at the precision the engine
runs, not the checkpoint's. Both the static estimate (fidelity/check.py) and aiconfigurator's own disagg
estimate (fidelity/aiconfigurator_estimate.py) read it here.
"""

from __future__ import annotations

from spica_lib.fidelity.silicon import SiliconRow


def fmha_dtype(row: SiliconRow) -> str | None:
    """The attention precision to read the perf DB at, where the checkpoint's is not what the engine runs:
    SGLang runs MLA attention (DeepSeek-style models) in bf16 over an fp8 KV cache, and its perf DB holds
    context-MLA timings only in bf16."""
    from aiconfigurator_core.sdk.utils import get_model_config_from_model_path

    raw = get_model_config_from_model_path(row.model).get("raw_config") or {}
    return "bfloat16" if row.backend == "sglang" and raw.get("kv_lora_rank") else None


def checkpoint_precision(model: str) -> str:
    """The precision the replay runs `model` in, spelled as the rows spell theirs: "" (its own dtype, bf16),
    "fp8", "fp4" or "int4"; any other quantisation by its method's name, which no row's precision matches."""
    from aiconfigurator_core.sdk.utils import get_model_config_from_model_path

    raw = get_model_config_from_model_path(model).get("raw_config") or {}
    quantisation = raw.get("quantization_config")
    if not quantisation:
        return ""
    method = str(quantisation.get("quant_method", "")).lower()
    if method == "fp8":
        return "fp8"
    if method == "mxfp4":
        return "fp4"
    if method == "modelopt":
        algorithm = str(quantisation.get("quant_algo", "")).upper()
        return {"FP8": "fp8", "NVFP4": "fp4"}.get(algorithm, f"modelopt {algorithm}")
    if method == "compressed-tensors":
        weights = [group.get("weights") or {} for group in (quantisation.get("config_groups") or {}).values()]
        kinds = {(w.get("type"), w.get("num_bits")) for w in weights}
        if len(kinds) == 1:
            kind, bits = kinds.pop()
            if kind == "int":
                return f"int{bits}"
            if kind == "float" and bits == 8:
                return "fp8"
        return f"compressed-tensors {sorted(kinds, key=str)}"
    return method or "an unnamed quantisation"
