"""Prometheus alert and recording rules for a serve plan: SLO burn, idle GPUs, monthly budget. Not a target: the
monitoring target wraps these groups.

`serving_rule_groups(plan)` returns PrometheusRule `spec.groups` entries; the monitoring target wraps them. The
series are selected the way k8s_serving deploys them: engine metrics carry the `namespace` and `service` labels
its ServiceMonitor adds; GPU series come from dcgm-exporter and kube-state-metrics, selected by pod name prefix.
Assumption: dcgm-exporter is scraped with honorLabels so its `namespace`/`pod` labels name the workload pod.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..deployment.units import unit_views
from ..plan.deployment import Alerting
from ..plan.deployment_serving import ServingUnit as DecidedUnit
from ..plan.resolved import ResolvedPlan, Serving

# The alert policy (error budget, burn windows, spend window) is decided in compiler/deployment/monitoring.py.

# vLLM's histogram bucket bounds (vllm/v1/metrics/loggers.py). An SLO between two bounds counts the good requests by
# linear interpolation inside that bucket, the same assumption histogram_quantile makes.
VLLM_TTFT_BUCKETS_SECONDS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)
VLLM_TPOT_BUCKETS_SECONDS = (
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
)
VLLM_TTFT = "vllm:time_to_first_token_seconds"
# TPOT: vLLM ≥ 0.10 hides vllm:time_per_output_token_seconds behind --show-hidden-metrics and records the same
# observations as vllm:inter_token_latency_seconds; match either (both present double numerator and denominator alike).
VLLM_TPOT_NAME_RE = "vllm:(inter_token_latency|time_per_output_token)_seconds"
TGI_TPOT = "tgi_request_mean_time_per_token_duration"  # TGI histogram (router/src/server.rs)


@dataclass(frozen=True)
class _Latency:
    slo: str
    metric: str  # a metric name, or a __name__ regex when regex=True
    regex: bool
    buckets: tuple[float, ...]
    target_seconds: float


@dataclass(frozen=True)
class ServingUnit:
    """What the rules need of one served unit: its object name and namespace, its sizing and its decisions."""

    name: str
    namespace: str
    serving: Serving
    usd_per_gpu_hour: float
    decided: DecidedUnit


def serving_units(plan: ResolvedPlan) -> list[ServingUnit]:
    k8s = plan.deployment.kubernetes
    decided = {u.stage: u for u in k8s.serving}
    return [
        ServingUnit(
            decided[v.stage].name, k8s.namespace, v.plan.serving, v.plan.hardware.usd_per_gpu_hour, decided[v.stage]
        )
        for v in unit_views(plan)
    ]


def _q(value: str) -> str:
    """A PromQL string literal (double-quoted; JSON escapes are valid Go escapes)."""
    return json.dumps(value)


def _selector(unit: ServingUnit, metric: str = "", regex: bool = False, **extra: str) -> str:
    namespace = unit.namespace
    matchers = [f"__name__=~{_q(metric)}"] if regex else []
    matchers += [f"namespace={_q(namespace)}", f"service={_q(unit.name)}", *(f"{k}={_q(v)}" for k, v in extra.items())]
    return f"{'' if regex else metric}{{{','.join(matchers)}}}"


def _pods(unit: ServingUnit, metric: str, **extra: str) -> str:
    namespace = unit.namespace
    matchers = [
        f"namespace={_q(namespace)}",
        f"pod=~{_q(unit.name + '-.+')}",
        *(f"{k}={_q(v)}" for k, v in extra.items()),
    ]
    return f"{metric}{{{','.join(matchers)}}}"


def slo_bounds(target_seconds: float, buckets: tuple[float, ...]) -> tuple[float, float | None]:
    """(lo, hi): the bucket bounds around the target; hi is None when the target is a bound or above all.
    lo is 0.0 below the first bound (a histogram's first bucket starts at 0)."""
    lo = max((b for b in buckets if b <= target_seconds), default=0.0)
    hi = min((b for b in buckets if b > target_seconds), default=None)
    return (lo, None) if lo == target_seconds or hi is None else (lo, hi)


def _le(bound: float) -> str:
    return repr(float(bound))  # prometheus_client writes le as Python's float repr ("1.0", "0.05")


def _latencies(unit: ServingUnit) -> list[_Latency]:
    s = unit.serving
    out = []
    if s.engine == "vllm":
        if s.ttft_slo_seconds:
            out.append(_Latency("ttft", VLLM_TTFT, False, VLLM_TTFT_BUCKETS_SECONDS, s.ttft_slo_seconds))
        if s.tpot_slo_seconds:
            out.append(_Latency("tpot", VLLM_TPOT_NAME_RE, True, VLLM_TPOT_BUCKETS_SECONDS, s.tpot_slo_seconds))
    elif s.engine == "tgi" and s.tpot_slo_seconds:
        out.append(_Latency("tpot", TGI_TPOT, False, (), s.tpot_slo_seconds))
    return out


def _series(unit: ServingUnit, lat: _Latency, suffix: str, **extra: str) -> str:
    if lat.regex:
        return _selector(unit, f"{lat.metric}{suffix}", regex=True, **extra)
    return _selector(unit, f"{lat.metric}{suffix}", **extra)


def _bucket_rate(unit: ServingUnit, lat: _Latency, bound: float, window: str) -> str:
    if bound == 0.0:
        return "0"
    return f"sum(rate({_series(unit, lat, '_bucket', le=_le(bound))}[{window}]))"


def _bad_ratio(unit: ServingUnit, lat: _Latency, window: str) -> str:
    """Share of observations above the target: 1 − good/total, good interpolated inside the target's bucket."""
    lo, hi = slo_bounds(lat.target_seconds, lat.buckets)
    good = _bucket_rate(unit, lat, lo, window)
    if hi is not None:
        fraction = (lat.target_seconds - lo) / (hi - lo)
        good = f"({good} + ({_bucket_rate(unit, lat, hi, window)} - {good}) * {fraction:.6g})"
    total = f"sum(rate({_series(unit, lat, '_count')}[{window}]))"
    return f"(1 - {good} / {total})"


def _p99(unit: ServingUnit, lat: _Latency, window: str) -> str:
    return f"histogram_quantile(0.99, sum by (le) (rate({_series(unit, lat, '_bucket')}[{window}])))"


def _labels(unit: ServingUnit, **extra: str) -> dict[str, str]:
    return {"namespace": unit.namespace, "service": unit.name, **extra}


def _slo_rules(unit: ServingUnit, policy: Alerting) -> list[dict]:
    rules = []
    for lat in _latencies(unit):
        name = lat.slo.upper()
        rules.append(
            {
                "record": f"mlinfra:serving_{lat.slo}_seconds:p99_5m",
                "expr": _p99(unit, lat, "5m"),
                "labels": _labels(unit),
            }
        )
        if not lat.buckets:  # bucket bounds unknown: alert on the p99 over the fast-burn window
            first = policy.burn_windows[0]
            long, severity = first.long, first.severity
            rules.append(
                {
                    "alert": f"Serving{name}P99AboveSlo",
                    "expr": f"{_p99(unit, lat, long)} > {lat.target_seconds:g}",
                    "labels": _labels(unit, severity=severity, slo=lat.slo),
                    "annotations": {
                        "summary": f"{unit.name}: {name} p99 over {long} above the {lat.target_seconds:g} s SLO"
                    },
                }
            )
            continue
        what = "requests" if lat.slo == "ttft" else "token intervals"
        for window in policy.burn_windows:
            long, short, burn, severity = window.long, window.short, window.burn_rate, window.severity
            limit = f"{burn * policy.error_budget_fraction:g}"
            rules.append(
                {
                    "alert": f"Serving{name}ErrorBudgetBurn",
                    "expr": f"{_bad_ratio(unit, lat, long)} > {limit} and {_bad_ratio(unit, lat, short)} > {limit}",
                    "labels": _labels(unit, severity=severity, slo=lat.slo, window=long),
                    "annotations": {
                        "summary": f"{unit.name}: {name} error budget burning {burn:g}× too fast over {long}",
                        "description": (
                            f"More than {float(limit):.1%} of {what} slower than the {lat.target_seconds:g} s "
                            f"p99 SLO over {long} and {short}; the SLO allows {policy.error_budget_fraction:.0%}."
                        ),
                    },
                }
            )
    if unit.serving.engine == "triton" and unit.serving.latency_slo_seconds:
        # Triton exports cumulative counters only (no histogram by default): the mean over the window. A mean above
        # the p99 target means the p99 is above it too, so this never alerts falsely (it may alert late).
        target, window = unit.serving.latency_slo_seconds, policy.burn_windows[0].short
        mean = (
            f"sum(rate({_selector(unit, 'nv_inference_request_duration_us')}[{window}])) / "
            f"sum(rate({_selector(unit, 'nv_inference_request_success')}[{window}])) / 1e6"
        )
        rules.append(
            {
                "alert": "ServingLatencyMeanAboveP99Slo",
                "expr": f"{mean} > {target:g}",
                "labels": _labels(unit, severity="critical", slo="latency"),
                "annotations": {"summary": f"{unit.name}: mean request latency above the {target:g} s p99 SLO"},
            }
        )
    return rules


def idle_seconds(unit: ServingUnit) -> int:
    """A GPU is reported idle after loading weights (the startup budget) and the autoscaler's scale-down window:
    past both, the autoscaler is not going to give it back (the unit sits at min_replicas)."""
    return unit.decided.scale_down_window_seconds + unit.decided.startup_budget_seconds


def _idle_rules(unit: ServingUnit) -> list[dict]:
    return [
        {
            "alert": "ServingGpuIdle",
            "expr": f"{_pods(unit, 'DCGM_FI_DEV_GPU_UTIL')} == 0",
            "for": f"{idle_seconds(unit)}s",
            "labels": _labels(unit, severity="warning"),
            "annotations": {
                "summary": (
                    f"{unit.name}: a GPU ran no kernel for {idle_seconds(unit)} s while the service held "
                    f"at least {unit.decided.min_replicas} replicas; lower min_replicas or check routing"
                )
            },
        }
    ]


def _spend_expr(plan: ResolvedPlan) -> str:
    """Monthly spend at the GPUs allocated now: Σ units GPUs × $/GPU-hour × 730 h (kube-state-metrics limits)."""
    terms = []
    for unit in serving_units(plan):
        gpus = _pods(unit, "kube_pod_container_resource_limits", resource="nvidia_com_gpu")
        terms.append(f"(sum({gpus}) or vector(0)) * {unit.usd_per_gpu_hour:g} * {plan.deployment.hours_per_month:g}")
    return " + ".join(terms)


def _budget_rules(plan: ResolvedPlan) -> list[dict]:
    cost = plan.cost
    plan_label = {"plan": plan.name}
    rules = [{"record": "mlinfra:serving_usd_per_month", "expr": _spend_expr(plan), "labels": plan_label}]
    if cost.budget_usd_per_month is None:
        return rules
    spend = f"avg_over_time(mlinfra:serving_usd_per_month{{plan={_q(plan.name)}}}[{plan.deployment.alerting.serving_spend_window}])"
    for share, severity in ((cost.alert_at, "warning"), (1.0, "critical")):
        limit = cost.budget_usd_per_month * share
        rules.append(
            {
                "alert": "ServingBudgetExceeded" if share == 1.0 else "ServingBudgetAlert",
                "expr": f"{spend} > {limit:g}",
                "labels": {**plan_label, "severity": severity},
                "annotations": {
                    "summary": (
                        f"{plan.name}: spend rate over {plan.deployment.alerting.serving_spend_window} above {share:.0%} of the "
                        f"${cost.budget_usd_per_month:,.0f}/month budget (${limit:,.0f}); "
                        f"planned ${cost.usd_per_month:,.0f}/month"
                    )
                },
            }
        )
    return rules


def serving_rule_groups(plan: ResolvedPlan) -> list[dict]:
    """PrometheusRule groups for a serve plan (empty for other workloads)."""
    if plan.workload != "serve" or plan.serving is None:
        return []
    units = serving_units(plan)
    groups = [
        {
            "name": f"{plan.name}.serving-slo",
            "rules": [r for u in units for r in _slo_rules(u, plan.deployment.alerting)],
        },
        {"name": f"{plan.name}.serving-gpus", "rules": [r for u in units for r in _idle_rules(u)]},
        {"name": f"{plan.name}.serving-budget", "rules": _budget_rules(plan)},
    ]
    return [g for g in groups if g["rules"]]
