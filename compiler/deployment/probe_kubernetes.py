"""How a probe's Kubernetes Job is run and read, from the probe's folder (REPORT.md lists these commands): apply it,
wait for it, retrieve the results from its log, calibrate them."""

from __future__ import annotations

import shlex

from ..plan.resolved import ResolvedPlan

# The Job's log holds the launchers' and frameworks' own lines too: the results are the one JSON line between these
# marker lines (probe.py, probe_serve.py, probe_triton.py --print-results), which the documented command extracts.
RESULTS_BEGIN = "----- mlinfra-compile probe results begin -----"
RESULTS_END = "----- mlinfra-compile probe results end -----"
EXTRACT_COMMAND = (
    "kubectl logs -n {namespace} job/{name} | "
    f"sed -n '/^{RESULTS_BEGIN}$/,/^{RESULTS_END}$/{{{{//!p}}}}' > probe-results.json"
)


def extract_command(plan: ResolvedPlan) -> str:
    """The documented retrieval: the probe Job's log, the results JSON between its marker lines, in the plan's
    namespace."""
    namespace = plan.deployment.kubernetes.namespace
    return EXTRACT_COMMAND.format(namespace=shlex.quote(namespace), name=shlex.quote(f"{plan.name}-probe"))


def kubernetes_commands(plan: ResolvedPlan, time_limit_seconds: int) -> list[str]:
    """How REPORT.md says to run probe-job.yaml, from the probe's folder: apply it, wait for the Job (its deadline is
    the probe's time limit), retrieve the results, calibrate them."""
    job = shlex.quote(f"job/{plan.name}-probe")
    namespace = shlex.quote(plan.deployment.kubernetes.namespace)
    return [
        "kubectl apply -f probe-job.yaml",
        f"kubectl wait -n {namespace} --for=condition=complete {job} --timeout={time_limit_seconds}s",
        extract_command(plan),
        "mlinfra-compile calibrate probe-results.json -o site-calibration.yaml",
    ]
