"""Benchmark: the replay and the static estimate against measured silicon, every supported row.

Replays each aggregated row of aiconfigurator-core's silicon_sample.csv for the given systems and
backends (default: h100_sxm and h200_sxm, vLLM) as it was measured (one engine of its shape, a closed
loop of its concurrency, its ISL/OSL; `spica_lib/fidelity/check.py`), and prints, per (system,
backend, model), the MAPE and signed bias of TTFT, TPOT and output tokens/s per GPU for the replay
and for the static estimate, then the rows skipped and why. The same as `spica fidelity`. With
`--fit FILE`, it then fits step-time scales per (system, backend) on half the rows (a fixed split,
`spica_lib/fidelity/fit.py`), writes them to FILE, replays the other half with them, and prints
that half's errors without and with the scales. It also prints the ranking table (`spica fidelity
--ranking`, `spica_lib/fidelity/ranking.py`): per group of rows measured alike, Kendall's tau and
top-1 regret of the replay's and the estimate's order. Every row is replayed by each replay protocol
(the default, aiconfigurator's benchmark settings; a 2048-token prefill budget; the search's 8192) and
the errors of all three are printed side by side (`spica fidelity --compare-protocols`,
`spica_lib/fidelity/protocol.py`). `--from-json FILE` reads an earlier run's `--json FILE` instead of
replaying.

Run: .venv/bin/python bench/fidelity.py [--system h100_sxm,h200_sxm] [--backend vllm] [--json FILE] [--fit FILE]
     [--from-json FILE] [--protocol aiconfigurator-benchmark|chunk-2048|search-default] [--jobs N]
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("DYN_LOG", "error")

from spica_lib.cli.fidelity import fidelity_command  # noqa: E402


def main() -> int:
    args = sys.argv[1:]
    option = {name: args[args.index(name) + 1] for name in ("--system", "--backend", "--json", "--fit", "--from-json",
                                                 "--protocol", "--jobs") if name in args}  # fmt: skip
    started = time.perf_counter()
    code = fidelity_command(
        option.get("--system", "h100_sxm,h200_sxm"),
        option.get("--backend", "vllm"),
        None,
        None,
        option.get("--json"),
        option.get("--fit"),
        ranking=True,
        from_json=option.get("--from-json"),
        protocol=option.get("--protocol", "aiconfigurator-benchmark"),
        compare_protocols=True,
        jobs=int(option.get("--jobs", "1")),
    )
    print(f"\n{time.perf_counter() - started:.0f} s on this machine")
    return code


if __name__ == "__main__":
    sys.exit(main())
