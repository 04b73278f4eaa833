"""Alert rules: thresholds from the plan, valid PromQL, a PrometheusRule valid against its CRD, and alerts that fire
(and stay quiet) on synthetic series under Prometheus's own rule engine (`promtool test rules`)."""

from __future__ import annotations

import re
import subprocess

import yaml

from compiler.pipeline import render_files
from compiler.targets import monitoring
from tests.fixtures.resolved_plans import deployed, serving_plan, training_plan
from tests.tools.realtools import promtool_bin, tool_python, validate_k8s

SLURM = {"scheduler": "slurm", "gpus": ["h100-sxm-80gb"]}
PYTORCHJOB = {
    "scheduler": "kubernetes",
    "gpus": ["h100-sxm-80gb"],
    "kubernetes": {"namespace": "ml", "shared_storage_class": "lustre-csi", "job_api": "pytorchjob"},
}


def groups_of(plan) -> list[dict]:
    doc = yaml.safe_load(monitoring.render(plan)[0].text)
    return doc["spec"]["groups"] if "spec" in doc else doc["groups"]


def rules_of(plan) -> dict[str, dict]:
    return {r["alert"]: r for g in groups_of(plan) for r in g["rules"] if "alert" in r}


def with_budget(plan, usd: float):
    return deployed(plan.model_copy(update={"cost": plan.cost.model_copy(update={"budget_usd": usd})}))


def test_rule_helper_shape():
    assert monitoring.rule("A", "up == 0", "5m", "warning", "s", plan="p") == {
        "alert": "A",
        "expr": "up == 0",
        "for": "5m",
        "labels": {"plan": "p", "severity": "warning"},
        "annotations": {"summary": "s"},
    }


def test_budget_alert_fires_at_alert_at_of_the_budget():
    rules = rules_of(training_plan())
    warn, crit = rules["TrainingBudgetAlert"], rules["TrainingBudgetExceeded"]
    assert " > 320000 and on() " in warn["expr"] and warn["labels"]["severity"] == "warning"  # 0.8 × $400k
    assert " > 400000 and on() " in crit["expr"] and crit["labels"]["severity"] == "critical"
    assert "/ 3600 * 256 >" in warn["expr"]  # $256/hour = 64 GPUs × $4 of the fixture


def test_budget_clock_is_the_configmap_the_training_target_creates():
    plan = training_plan()
    config_map = next(yaml.safe_load_all(render_files(plan, only=("k8s_training",))[0].text))
    assert config_map["kind"] == "ConfigMap"
    expected = f'kube_configmap_created{{namespace="ml",configmap="{config_map["metadata"]["name"]}"}}'
    assert expected in rules_of(plan)["TrainingBudgetAlert"]["expr"]


def test_no_budget_no_budget_rules():
    assert "TrainingBudgetAlert" not in rules_of(with_budget(training_plan(), None))


def test_pod_selector_matches_the_trainer_pods_only():
    jobset = re.compile(monitoring.trainer_pod_regex(training_plan()))
    # Indexed Job pods of JobSet job "<jobset>-trainer-0" are "<job>-<index>-<5 random chars>"
    assert jobset.fullmatch("llama3-8b-pretrain-trainer-0-7-x2k9q")
    assert not jobset.fullmatch("llama3-8b-pretrain-v2-trainer-0-0-x2k9q")  # another plan with a longer name
    assert not jobset.fullmatch("llama3-8b-pretrain-launch")
    pytorchjob = re.compile(monitoring.trainer_pod_regex(training_plan(cluster=PYTORCHJOB)))
    assert pytorchjob.fullmatch("llama3-8b-pretrain-master-0") and pytorchjob.fullmatch("llama3-8b-pretrain-worker-6")
    assert not pytorchjob.fullmatch("llama3-8b-pretrain-worker-6-old")


def test_stall_window_covers_a_checkpoint_write_and_five_steps_but_at_least_ten_minutes():
    plan = training_plan()
    assert rules_of(plan)["TrainingStalled"]["for"] == "600s"  # 40 s write + 5 × 9.5 s = 87.5 s < 600 s
    slow = deployed(
        plan.model_copy(update={"training": plan.training.model_copy(update={"checkpoint_write_seconds": 900.0})})
    )
    assert rules_of(slow)["TrainingStalled"]["for"] == "948s"  # 900 + 47.5 = 947.5 → 948
    assert rules_of(slow)["TrainingGpuIdle"]["for"] == "948s"  # idle waits at least as long as a stall


def test_kubernetes_plans_get_a_prometheusrule_in_the_job_namespace():
    doc = yaml.safe_load(monitoring.render(training_plan())[0].text)
    assert doc["kind"] == "PrometheusRule" and doc["metadata"]["namespace"] == "ml"
    assert doc["metadata"]["labels"]["app.kubernetes.io/component"] == "monitoring"


def test_slurm_plans_get_a_plain_rule_file_with_gpu_hour_spend():
    plan = training_plan(cluster=SLURM)
    doc = yaml.safe_load(monitoring.render(plan)[0].text)
    assert set(doc) == {"groups"}
    rules = rules_of(plan)
    assert "TrainingGpuMetricsMissing" not in rules  # no pod phase to tell "not started" from "blind"
    # window = $400k / $256 per hour = 1562.5 h = 65.1 days → 66 d
    assert rules["TrainingBudgetAlert"]["expr"].startswith(
        'sum_over_time(count(DCGM_FI_DEV_GPU_UTIL{job="llama3-8b-pretrain"})[66d:300s]) * 300 / 3600 * 4 > 320000'
    )


def test_serving_plans_carry_the_slo_groups_and_no_training_group():
    names = {g["name"] for g in groups_of(serving_plan())}
    assert not any(n.endswith(".training") for n in names)
    assert any("TTFT" in alert for alert in rules_of(serving_plan()))


def promql_errors(expressions: list[str]) -> list[str]:
    python = tool_python("k8s")
    errors = []
    for expr in expressions:
        run = subprocess.run(
            [str(python), "-c", "import sys, promql_parser; promql_parser.parse(sys.stdin.read())"],
            input=expr,
            capture_output=True,
            text=True,
        )
        if run.returncode:
            errors.append(f"{expr}: {run.stderr.strip().splitlines()[-1]}")
    return errors


def test_every_expression_is_valid_promql_and_a_broken_one_is_not():
    plans = (training_plan(), training_plan(cluster=SLURM), training_plan(cluster=PYTORCHJOB), serving_plan())
    exprs = [r["expr"] for plan in plans for g in groups_of(plan) for r in g["rules"]]
    assert promql_errors(exprs) == []
    assert promql_errors(["sum(rate(x[5m]) >"])  # the check can fail


def test_prometheusrule_validates_against_the_upstream_crd(tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text(monitoring.render(training_plan())[0].text)
    assert validate_k8s([path]) == []
    bad = tmp_path / "bad.yaml"
    bad.write_text(path.read_text().replace("groups:", "grups:"))
    assert validate_k8s([bad])


# ---------------------------------------------------------------- Prometheus's own rule engine (promtool)


def promtool_test(tmp_path, groups: list[dict], tests: list[dict]) -> subprocess.CompletedProcess:
    """`promtool test rules` (Prometheus 2.42, Debian package `prometheus`) over our groups and synthetic series."""
    promtool = promtool_bin()
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}, sort_keys=False))
    (tmp_path / "test.yaml").write_text(
        yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "1m", "tests": tests}, sort_keys=False)
    )
    check = subprocess.run(
        [promtool, "check", "rules", str(tmp_path / "rules.yaml")], capture_output=True, text=True, timeout=60
    )
    assert check.returncode == 0, check.stdout + check.stderr
    return subprocess.run(
        [promtool, "test", "rules", str(tmp_path / "test.yaml")], capture_output=True, text=True, timeout=120
    )


def expected(rules: dict[str, dict], alert: str, **series_labels: str) -> dict:
    rule = rules[alert]
    return {"exp_labels": {**series_labels, **rule["labels"]}, "exp_annotations": rule["annotations"]}


POD = "llama3-8b-pretrain-trainer-0-0-abcde"
RUNNING = f'kube_pod_status_phase{{namespace="ml",pod="{POD}",phase="Running"}}'


def gpu(pod: str, index: int) -> str:
    return f'DCGM_FI_DEV_GPU_UTIL{{namespace="ml",pod="{pod}",gpu="{index}"}}'


def test_promtool_idle_stall_and_missing_metrics(tmp_path):
    plan = training_plan()
    rules = rules_of(plan)
    tests = [
        {  # GPU 0 busy, GPU 1 at 5 % from minute 5: idle after 900 s, the job is not stalled
            "interval": "1m",
            "input_series": [
                {"series": gpu(POD, 0), "values": "90x40"},
                {"series": gpu(POD, 1), "values": "90x4 5x35"},
                {"series": gpu("other-plan-trainer-0-0-zzzzz", 0), "values": "0x40"},
            ],
            "alert_rule_test": [
                {"eval_time": "15m", "alertname": "TrainingGpuIdle", "exp_alerts": []},  # pending for 10 of 15 min
                {
                    "eval_time": "21m",
                    "alertname": "TrainingGpuIdle",
                    "exp_alerts": [expected(rules, "TrainingGpuIdle", pod=POD, gpu="1")],
                },
                {"eval_time": "30m", "alertname": "TrainingStalled", "exp_alerts": []},
            ],
        },
        {  # every GPU of the job at 0 from minute 5: stalled after 600 s
            "interval": "1m",
            "input_series": [
                {"series": gpu(POD, 0), "values": "90x4 0x30"},
                {"series": gpu(POD, 1), "values": "90x4 0x30"},
            ],
            "alert_rule_test": [
                {"eval_time": "14m", "alertname": "TrainingStalled", "exp_alerts": []},
                {
                    "eval_time": "16m",
                    "alertname": "TrainingStalled",
                    "exp_alerts": [expected(rules, "TrainingStalled")],
                },
            ],
        },
        {  # a trainer pod runs, dcgm-exporter reports nothing of it: missing after 600 s
            "interval": "1m",
            "input_series": [
                {"series": RUNNING, "values": "1x30"},
                {"series": gpu("other-plan-trainer-0-0-zzzzz", 0), "values": "90x30"},
            ],
            "alert_rule_test": [
                {"eval_time": "9m", "alertname": "TrainingGpuMetricsMissing", "exp_alerts": []},
                {
                    "eval_time": "11m",
                    "alertname": "TrainingGpuMetricsMissing",
                    "exp_alerts": [expected(rules, "TrainingGpuMetricsMissing", namespace="ml")],
                },
            ],
        },
    ]
    run = promtool_test(tmp_path, groups_of(plan), tests)
    assert run.returncode == 0, run.stdout + run.stderr


def test_promtool_kubernetes_budget_burn(tmp_path):
    # $1,000 budget at $256/hour: 80 % ($800) after 3.125 h, 100 % after 3.906 h from the ConfigMap's creation (t=0)
    plan = with_budget(training_plan(), 1000)
    rules = rules_of(plan)
    created = 'kube_configmap_created{namespace="ml",configmap="llama3-8b-pretrain-launch"}'
    tests = [
        {
            "interval": "1m",
            "input_series": [{"series": created, "values": "0x300"}, {"series": RUNNING, "values": "1x300"}],
            "alert_rule_test": [
                {"eval_time": "3h", "alertname": "TrainingBudgetAlert", "exp_alerts": []},  # $768
                {
                    "eval_time": "3h10m",
                    "alertname": "TrainingBudgetAlert",
                    "exp_alerts": [expected(rules, "TrainingBudgetAlert")],
                },
                {"eval_time": "3h50m", "alertname": "TrainingBudgetExceeded", "exp_alerts": []},  # $981
                {
                    "eval_time": "4h",
                    "alertname": "TrainingBudgetExceeded",
                    "exp_alerts": [expected(rules, "TrainingBudgetExceeded")],
                },
            ],
        },
        {  # the job finished (no trainer pod runs): the clock no longer alerts
            "interval": "1m",
            "input_series": [{"series": created, "values": "0x300"}, {"series": RUNNING, "values": "1x60 0x240"}],
            "alert_rule_test": [{"eval_time": "4h", "alertname": "TrainingBudgetExceeded", "exp_alerts": []}],
        },
    ]
    run = promtool_test(tmp_path, groups_of(plan), tests)
    assert run.returncode == 0, run.stdout + run.stderr


def test_promtool_slurm_budget_counts_gpu_hours(tmp_path):
    # 64 GPUs reporting from t=0; each 5-minute step counts 64 × 300 s = 5.33 GPU-hours = $21.33 at $4/GPU-hour.
    # At 3 h: steps 0, 5, ..., 180 min = 37 → $789 < $800. At 3 h 15 min: 40 steps → $853 > $800.
    plan = with_budget(training_plan(cluster=SLURM), 1000)
    rules = rules_of(plan)
    series = [
        {
            "series": f'DCGM_FI_DEV_GPU_UTIL{{job="llama3-8b-pretrain",Hostname="n{i // 8}",gpu="{i % 8}"}}',
            "values": "90x240",
        }
        for i in range(64)
    ]
    tests = [
        {
            "interval": "1m",
            "input_series": series,
            "alert_rule_test": [
                {"eval_time": "3h", "alertname": "TrainingBudgetAlert", "exp_alerts": []},
                {
                    "eval_time": "3h15m",
                    "alertname": "TrainingBudgetAlert",
                    "exp_alerts": [expected(rules, "TrainingBudgetAlert")],
                },
            ],
        }
    ]
    run = promtool_test(tmp_path, groups_of(plan), tests)
    assert run.returncode == 0, run.stdout + run.stderr


def test_promtool_catches_a_wrong_expectation(tmp_path):
    plan = training_plan()
    tests = [
        {
            "interval": "1m",
            "input_series": [{"series": gpu(POD, 0), "values": "90x30"}],
            "alert_rule_test": [
                {
                    "eval_time": "20m",
                    "alertname": "TrainingStalled",
                    "exp_alerts": [expected(rules_of(plan), "TrainingStalled")],
                }
            ],
        }
    ]
    run = promtool_test(tmp_path, groups_of(plan), tests)
    assert run.returncode != 0 and "TrainingStalled" in run.stdout + run.stderr  # a busy GPU does not stall
