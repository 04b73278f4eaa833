"""Alert rules: right thresholds from the plan, valid PromQL (promql-parser), PrometheusRule against its CRD."""

from __future__ import annotations

import subprocess

import yaml

from compiler.targets import monitoring
from tests.fixtures.resolved_plans import serving_plan, training_plan
from tests.tools.realtools import tool_python, validate_k8s


def rules_of(plan):
    doc = yaml.safe_load(monitoring.render(plan)[0].text)
    groups = doc["spec"]["groups"] if "spec" in doc else doc["groups"]
    return {r["alert"]: r for g in groups for r in g["rules"] if "alert" in r}


def promql_errors(expressions: list[str]) -> list[str]:
    python = tool_python("k8s")
    errors = []
    for expr in expressions:
        run = subprocess.run([str(python), "-c", "import sys, promql_parser; promql_parser.parse(sys.stdin.read())"],
                             input=expr, capture_output=True, text=True)
        if run.returncode:
            errors.append(f"{expr}: {run.stderr.strip().splitlines()[-1]}")
    return errors


def test_budget_alert_fires_at_alert_at_of_the_budget():
    rules = rules_of(training_plan())
    assert rules["llama3-8b-pretrain-budget-burn"]["expr"].endswith("> 320000")  # 0.8 × $400k
    assert rules["llama3-8b-pretrain-over-budget"]["expr"].endswith("> 400000")
    assert "* 4 >" in rules["llama3-8b-pretrain-budget-burn"]["expr"]  # $4/GPU-hour of the fixture


def test_stall_window_is_five_steps_but_at_least_ten_minutes():
    assert rules_of(training_plan())["llama3-8b-pretrain-stalled"]["for"] == "600s"  # 5 × 9.5 s < 600 s


def test_kubernetes_plans_get_a_prometheusrule_scoped_to_the_job_pods():
    doc = yaml.safe_load(monitoring.render(training_plan())[0].text)
    assert doc["kind"] == "PrometheusRule" and doc["metadata"]["namespace"] == "ml"
    assert 'pod=~"llama3-8b-pretrain-.*"' in rules_of(training_plan())["llama3-8b-pretrain-gpu-idle"]["expr"]


def test_slurm_plans_get_a_plain_rule_file():
    plan = training_plan(cluster={"scheduler": "slurm", "gpus": ["h100-sxm-80gb"]})
    doc = yaml.safe_load(monitoring.render(plan)[0].text)
    assert set(doc) == {"groups"}


def test_serving_plans_carry_the_slo_groups():
    assert any("ttft" in name.lower() for name in rules_of(serving_plan()))


def test_every_expression_is_valid_promql_and_a_broken_one_is_not():
    exprs = [r["expr"] for plan in (training_plan(), serving_plan()) for r in rules_of(plan).values()]
    assert promql_errors(exprs) == []
    assert promql_errors(["sum(rate(x[5m]) >"])  # the check can fail


def test_prometheusrule_validates_against_the_upstream_crd(tmp_path):
    path = tmp_path / "rules.yaml"
    path.write_text(monitoring.render(training_plan())[0].text)
    assert validate_k8s([path]) == []
    bad = tmp_path / "bad.yaml"
    bad.write_text(path.read_text().replace("groups:", "grups:"))
    assert validate_k8s([bad])
