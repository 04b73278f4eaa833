"""A staged service is probed stage by stage: each stage as a plan of its own, sized exactly as the staged plan sizes
that stage, probed by its own engine's probe; calibrate writes one site file from every stage's results, and the
staged plan compiles with it, each GPU's shares fitted to its own stage's points."""

from __future__ import annotations

import json
import shlex

import pytest
import yaml

from tests.conftest import REPO, run_cli

EXAMPLE = REPO / "examples" / "image-captioning.yaml"


def _probed(tmp_path) -> dict[str, dict]:
    """Each stage's probe settings, by stage name, after `probe` wrote the folders."""
    result = run_cli("probe", EXAMPLE, "-o", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    return {
        stage: json.loads((tmp_path / f"out/image-captioning-{stage}-probe/settings.json").read_text())
        for stage in ("vision", "caption")
    }


def test_each_stage_is_probed_as_a_plan_sized_as_the_staged_plan_sizes_that_stage(tmp_path):
    settings = _probed(tmp_path)
    assert settings["vision"]["triton"]["model"] == "vit-l-16" and "serving" not in settings["vision"]
    assert settings["caption"]["serving"]["engine"] == "vllm" and settings["caption"]["gpu_id"] == "a100-sxm-80gb"
    compiled = run_cli("-q", EXAMPLE, "-o", tmp_path / "compiled")
    assert compiled.returncode == 0, compiled.stderr
    staged = json.loads((tmp_path / "compiled/image-captioning/plan.json").read_text())
    for stage in staged["stages"]:
        own = json.loads((tmp_path / f"out/image-captioning-{stage['name']}-probe/plan.json").read_text())
        assert own["hardware"]["gpu"] == stage["hardware"]["gpu"], stage["name"]
        assert own["serving"] == stage["serving"], stage["name"]  # every decision and headline, P50s included
    assert "image-captioning" in (tmp_path / "out/image-captioning-vision-probe/REPORT.md").read_text()


def _triton_results(s: dict) -> dict:
    from tests.test_probe_results import triton_results

    return triton_results(s, 1.3, measured_at="2026-11-29")


def _vllm_results(s: dict) -> dict:
    v = s["serving"]
    points = [
        {"concurrency": c, "completed": 2 * c, "median_ttft_ms": 60.0 * c**0.5, "median_tpot_ms": 12.0 + 0.05 * c}
        for c in v["concurrencies"]
    ]
    return {
        **_common(s, "NVIDIA A100-SXM4-80GB"),
        "engine": "vllm",
        "tp": v["tp"],
        "prompt_tokens": v["prompt_tokens"],
        "output_tokens": v["output_tokens"],
        "points": points,
        "plan_text": v["plan_text"],
    }


def _common(s: dict, device: str) -> dict:
    return {
        "version": 3,
        "kind": "serving",
        "plan": s["plan"],
        "gpu_id": s["gpu_id"],
        "architecture": s["architecture"],
        "precision": s["precision"],
        "measured_at": "2026-11-29",
        "device_name": device,
        "environment": {"device": "cuda", "gpu_name": device, "host": "gpu017"},
    }


def test_every_stages_results_calibrate_one_site_file_the_staged_plan_compiles_with(tmp_path):
    """Each stage's REPORT gives the one calibrate of every stage's results (the Slurm jobs' runs folders); run as
    written from a stage's folder it writes the site file the staged plan compiles with."""
    settings = _probed(tmp_path)
    out = tmp_path / "out"
    for stage, results in (("vision", _triton_results), ("caption", _vllm_results)):
        runs = out / f"runs/image-captioning-{stage}-probe"
        (runs / "probe-results.json").write_text(json.dumps(results(settings[stage])))
    folder = out / "image-captioning-caption-probe"
    service = json.loads((folder / "plan.json").read_text())["probe"]["service"]
    assert service["probes"] == ["image-captioning-vision-probe", "image-captioning-caption-probe"]
    assert f"`{service['calibrate']}` from this folder" in (folder / "REPORT.md").read_text()
    assert json.loads((folder / "plan.json").read_text())["probe"]["kubernetes"]["commands"][-1] == (
        "mlinfra-compile calibrate ../image-captioning-vision-probe/probe-results.json "
        "../image-captioning-caption-probe/probe-results.json -o site-calibration.yaml"
    )
    command = shlex.split(service["calibrate"])
    assert command[:2] == ["mlinfra-compile", "calibrate"]
    calibrated = run_cli(*command[1:], "--site", "ci", cwd=folder)
    assert calibrated.returncode == 0, calibrated.stderr
    (folder / "site-calibration.yaml").rename(tmp_path / "site.yaml")
    lines = [l for l in calibrated.stdout.splitlines() if not l.startswith("wrote ")]
    assert [l.split(":")[0] for l in lines] == ["image-captioning-vision"] * 3 + ["image-captioning-caption"] * 4
    site = yaml.safe_load((tmp_path / "site.yaml").read_text())
    assert {p["gpu"] for p in site["vision_points"]} == {"t4-16gb"}
    assert [(p["gpu"], p["phase"], p["batch"]) for p in site["serving_points"]] == [
        ("a100-sxm-80gb", "prefill", 1),
        ("a100-sxm-80gb", "decode", 1),
        ("a100-sxm-80gb", "decode", 16),
        ("a100-sxm-80gb", "decode", 256),
    ]
    assert "image-captioning-vision" in site["source"] and "image-captioning-caption" in site["source"]
    plan = yaml.safe_load(EXAMPLE.read_text())
    plan["cluster"]["calibration"] = "site.yaml"
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    explained = run_cli("explain", "plan.yaml", cwd=tmp_path)
    assert explained.returncode == 0, explained.stderr
    assert "site calibration (a100-sxm-80gb, HBM)" in explained.stdout


def test_a_training_probes_results_calibrate_alone(tmp_path):
    from tests.test_probe_results import synthetic_results

    settings = _probed(tmp_path)
    (tmp_path / "caption.json").write_text(json.dumps(_vllm_results(settings["caption"])))
    (tmp_path / "train.json").write_text(json.dumps(synthetic_results(tmp_path)))
    result = run_cli("calibrate", tmp_path / "train.json", tmp_path / "caption.json", "-o", tmp_path / "site.yaml")
    assert result.returncode == 2 and "a training probe's results calibrate alone" in result.stderr, result.stderr
    assert not (tmp_path / "site.yaml").exists()


def test_a_stage_no_probe_measures_is_left_out_and_keeps_the_published_ranges(tmp_path):
    """A TGI caption stage: no probe runs TGI's benchmark, so `probe` writes the vision stage's folder alone, warns
    (exit 0) and says so in its REPORT; its calibrate writes a site file the staged plan compiles with, the caption
    stage's headline still at the published P50 (nothing measured it), the vision stage's at the site's own fit."""
    plan = yaml.safe_load(EXAMPLE.read_text())
    plan["serve"]["stages"][1]["engine"] = "tgi"
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    probed = run_cli("probe", "plan.yaml", "-o", "out", cwd=tmp_path)
    assert probed.returncode == 0, probed.stderr
    assert "(stage caption): warning:" in probed.stderr and "tgi engine's benchmark" in probed.stderr
    out = tmp_path / "out"
    assert sorted(p.name for p in out.iterdir()) == ["image-captioning-vision-probe", "runs"]
    folder = out / "image-captioning-vision-probe"
    service = json.loads((folder / "plan.json").read_text())["probe"]["service"]
    assert service["probes"] == ["image-captioning-vision-probe"]
    assert [u["stage"] for u in service["unprobed"]] == ["caption"]
    assert "Stage `caption` is not probed" in (folder / "REPORT.md").read_text()
    settings = json.loads((folder / "settings.json").read_text())
    runs = out / "runs/image-captioning-vision-probe"
    (runs / "probe-results.json").write_text(json.dumps(_triton_results(settings)))
    calibrated = run_cli(*shlex.split(service["calibrate"])[1:], "--site", "ci", cwd=folder)
    assert calibrated.returncode == 0, calibrated.stderr
    plan["cluster"]["calibration"] = "out/image-captioning-vision-probe/site-calibration.yaml"
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan, sort_keys=False))
    compiled = run_cli("-q", "plan.yaml", "-o", "compiled", cwd=tmp_path)
    assert compiled.returncode == 0, compiled.stderr
    stages = {
        s["name"]: s for s in json.loads((tmp_path / "compiled/image-captioning/plan.json").read_text())["stages"]
    }
    published = yaml.safe_load((REPO / "compiler/catalog/residuals.yaml").read_text())["families"]["serve-ttft"]
    ttft = next(r for r in stages["caption"]["ranges"] if r["quantity"] == "serving.ttft_seconds")
    assert ttft["p50"] / ttft["roofline"] == pytest.approx(published["p50"], rel=1e-3)
