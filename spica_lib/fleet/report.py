"""What a fleet run hands back besides fleet.json: report.md and each model's deployment files.

The deployment files are the single-model ones (deploy/top.py), one set per replica of the chosen
deployment, in `deploy/<model>/<replica>/`, named `spica-<fleet>-<model>-<replica>`
(deploy/k8s_names.py): every model's replicas stand side by side in one namespace.
"""

from __future__ import annotations

from pathlib import Path

from spica_lib.base.artifacts import atomic_write_text
from spica_lib.deploy.k8s_names import DEFAULT_NAMESPACE
from spica_lib.fleet.layout import FleetFiles
from spica_lib.fleet.plan import FleetPlan


def _gpus(gpus: dict[str, int]) -> str:
    return " + ".join(f"{n} x {sku}" for sku, n in gpus.items() if n) or "none"


def fleet_markdown(plan: FleetPlan) -> str:
    lines = [f"# Fleet {plan.run}", "", f"Goal: `{plan.goal}` on {_gpus(plan.inventory)}.", ""]
    if not plan.feasible:
        lines += [f"**No plan**: {plan.message}", ""]
    else:
        lines += [
            "## Several models on one fleet",
            "",
            "| model | deployment | replicas | GPUs | capacity req/s | offered req/s | headroom (required) | $/h | confirmed |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for d in plan.deployments:
            confirmed = f"{d.confirmed.met}/{d.confirmed.samples} at {d.confirmed.rate_rps:.3g} req/s" if d.confirmed else "-"
            lines.append(
                f"| {d.model} | {d.label} | {d.replicas} | {_gpus(d.gpus)} | {d.capacity_rps:.3g} | {d.offered_rps:.3g} "
                f"| {100 * d.headroom:.0f} % ({100 * d.required_headroom:.0f} %) | {d.usd_per_hour:.2f} | {confirmed} |"
            )
        lines += [
            "",
            f"Total: {plan.usd_per_hour:.2f} $/h; smallest headroom {100 * (plan.min_headroom or 0):.0f} %; "
            f"inventory left: {_gpus(plan.inventory_left)}.",
            "",
            "Capacity per replica comes from each model's run: "
            + "; ".join(f"{d.model}: {d.capacity_source}" for d in plan.deployments if d.capacity_source)
            + ". Replicas are assumed to add capacity linearly; each chosen deployment was replayed at its share "
            "of the traffic with the required headroom, on fresh samples.",
            "",
            "Binding: " + ("; ".join(f"{b.constraint} ({b.detail})" for b in plan.binding) or "nothing binds"),
            "",
        ]
    if plan.dropped:
        lines += ["Dropped after missing the SLA on their confirming replays:"]
        lines += [f"- {d.model}: {d.key[:12]} x{d.replicas}: {d.why}" for d in plan.dropped]
        lines.append("")
    naive = plan.naive
    if naive is not None:
        lines += ["### Against the naive split", "",
                  "Each model alone on a share of every GPU type proportional to its offered rate:", ""]  # fmt: skip
        for m in naive.models:
            what = "nothing fits" if m.choice is None else f"{m.choice.candidate.label} x{m.choice.replicas}"
            verdict = "serves it" if m.meets_sla else "**misses its SLA or headroom**"
            kept = "" if m.headroom is None else f", {100 * m.headroom:.0f} % headroom"
            lines.append(f"- {m.model} on {_gpus(m.share)}: {what}{kept}: {verdict}")
        lines.append("")
        if naive.fails:
            lines.append(f"The naive split fails {naive.fails}; the plan serves every model.")
        elif naive.gpus_saved is not None:
            lines.append(
                f"The naive split: {naive.gpus} GPUs, {naive.usd_per_hour:.2f} $/h; the plan saves "
                f"{naive.gpus_saved} GPUs and {naive.usd_per_hour_saved:.2f} $/h."
            )
        lines.append("")
    return "\n".join(lines)


def write_fleet_report(files: FleetFiles, plan: FleetPlan, namespace: str = DEFAULT_NAMESPACE) -> list[str]:
    """report.md and deploy/<model>/<replica>/; the paths written."""
    from spica_lib.deploy.top import write_deployment
    from spica_lib.run.view import RunView

    atomic_write_text(files.report_md, fleet_markdown(plan) + "\n")
    Path(files.deploy_dir).mkdir(parents=True, exist_ok=True)  # declared even when there is no plan
    written = [files.report_md]
    for d in plan.deployments:
        view = RunView(files.model_run(d.model).dir)
        for replica in range(1, d.replicas + 1):
            folder = f"{files.model_deployment(d.model)}/{replica}"
            write_deployment(folder, replica, view.records[d.key], view.config, run=f"{plan.run}-{d.model}",
                             namespace=namespace)  # fmt: skip
            written.append(folder)
    return written
