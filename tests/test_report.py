"""REPORT.md reads right for every kind of plan: no empty sections, vision stages in their own words."""

from __future__ import annotations

import re

import pytest

from compiler.pipeline import compile_plan
from tests.conftest import EXAMPLES, REPO


def _report(example) -> str:
    return next(f.text for f in compile_plan(example).files if f.path == "REPORT.md")


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_no_section_is_empty(example):
    text = _report(example)
    sections = re.split(r"^## ", text, flags=re.M)[1:]
    empty = [s.splitlines()[0] for s in sections if not "\n".join(s.splitlines()[1:]).strip()]
    assert empty == [] and text.endswith("\n") and not text.endswith("\n\n")


def test_a_staged_service_shows_no_empty_alternatives_table():
    text = _report(REPO / "examples" / "image-captioning.yaml")
    assert "candidate configurations were evaluated" not in text or "| ✔ |" in text


@pytest.mark.parametrize("example", ["image-captioning.yaml", "resnet50-triton.yaml", "mobilenet-jetson.yaml"])
def test_vision_serving_is_described_in_items_and_latency(example):
    text = _report(REPO / "examples" / example)
    vision_lines = [l for l in text.splitlines() if l.startswith("- **") and "batch**" in l and "caption" not in l]
    assert vision_lines and all(
        "items per batch" in l and "sequences" not in l and "TPOT" not in l for l in vision_lines
    ), vision_lines
    assert "1 replicas" not in text and "1 GPUs" not in text


@pytest.mark.parametrize("example", ["llama3-8b-pretrain.yaml", "llama3-8b-chat.yaml"])
def test_monitoring_states_its_assumptions_in_the_rules_file_and_the_report(example):
    files = {f.path: f.text for f in compile_plan(REPO / "examples" / example).files}
    rules = files["monitoring/prometheus-rules.yaml"]
    assumed = [l for l in rules.splitlines() if l.startswith("# Assumes: ")]
    assert any("dcgm-exporter" in l for l in assumed)
    assert "**monitoring assumes**" in files["REPORT.md"] and "dcgm-exporter" in files["REPORT.md"]
    if "pretrain" in example:
        assert any('job="llama3-8b-pretrain"' in l for l in assumed) and any("retention" in l for l in assumed)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_the_pareto_front_holds_only_non_dominated_options(example):
    """On the axes the report draws: no option is both dearer and slower than another (one was, for serving)."""
    from compiler.pipeline import resolve

    points = [(a.usd, a.seconds) for a in resolve(example).alternatives]
    dominated = [p for p in points if any(q != p and q[0] <= p[0] and q[1] <= p[1] for q in points)]
    assert dominated == []


def test_the_whole_run_terms_are_decided_once_and_shown_with_their_sources():
    """plan.json carries each whole-run term; goodput is 1 / (1 + their sum), the wall time is the steady steps ÷ goodput,
    and REPORT.md and the time decision show the same figures with their sources."""
    from compiler.pipeline import resolve

    plan = resolve(REPO / "examples" / "llama3-405b-pretrain.yaml")
    t = plan.training
    terms = (
        t.whole_run_failures_share,
        t.whole_run_checkpoints_share,
        t.whole_run_stragglers_share,
        t.whole_run_evaluation_share,
    )
    assert all(share > 0 for share in terms)  # Megatron on 2048 GPUs: every term applies
    assert t.goodput == pytest.approx(1 / (1 + sum(terms)))
    roofline = {r.quantity: r.roofline for r in plan.ranges}  # the headlines are P50s of different families
    assert roofline["training.wall_seconds"] == pytest.approx(t.steps * roofline["training.step_seconds"] / t.goodput)
    report = _report(REPO / "examples" / "llama3-405b-pretrain.yaml")
    row = next(line for line in report.splitlines() if line.startswith("| whole-run terms |"))
    assert f"stragglers {100 * t.whole_run_stragglers_share:.1f} s" in row and "Sinha et al. 2022" in row
    assert "Megatron-LM's default evaluation" in row and "Llama 3 paper" in row
    time = next(d.reason for d in plan.decisions if d.topic == "time")
    assert f"evaluation {100 * t.whole_run_evaluation_share:.1f} s" in time
