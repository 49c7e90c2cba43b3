"""Benchmark: the replay, the static estimate and aiconfigurator's disagg estimate against the measured
disaggregated rows of aiconfigurator-core's silicon_sample.csv.

Reads every disagg row, refuses those the pinned replay cannot run as measured (counted by reason:
TRT-LLM disagg, attention DP, precision, concurrency not recorded, ...), keeps at most 8 rows per group
of rows measured alike with concurrency <= 1024 (`spica_lib/fidelity/cap.py`, DISAGG_CAP: about 5 min of
CPU on a 2-core machine), replays each kept row as a pinned one-deployment disagg sweep
(`spica_lib/fidelity/protocol.py`, the `disagg-measured` protocol) and prints, per (system, backend,
model, ISL/OSL), the MAPE and bias of TTFT, TPOT and tokens/s/GPU, then the ranking table (Kendall's
tau and top-1 regret by tokens/s/GPU and by goodput under the default SLA). The same as
`spica fidelity --mode disagg --ranking`. With `--fit FILE`, fits the step scales on half the rows and
reports the held-out half with and without them.

Run: .venv/bin/python bench/fidelity_disagg.py [--system gb200,...] [--json FILE] [--fit FILE] [--from-json FILE] [--jobs N]
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("DYN_LOG", "error")

from spica_lib.cli.fidelity import fidelity_command  # noqa: E402


def main() -> int:
    args = sys.argv[1:]
    option = {name: args[args.index(name) + 1] for name in ("--system", "--json", "--fit", "--from-json", "--jobs")
              if name in args}  # fmt: skip
    started, cpu = time.perf_counter(), time.process_time()
    code = fidelity_command(
        option.get("--system"), "sglang,vllm,trtllm", None, None, option.get("--json"), option.get("--fit"),
        ranking=True, from_json=option.get("--from-json"), jobs=int(option.get("--jobs", "1")), mode="disagg",
    )  # fmt: skip
    children = os.times()
    print(f"\n{time.perf_counter() - started:.0f} s wall, {time.process_time() - cpu + children.children_user + children.children_system:.0f} s CPU on this machine")
    return code


if __name__ == "__main__":
    sys.exit(main())
