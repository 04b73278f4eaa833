"""The links and the node: collectives measured by the probe (inside a node, across two) → the site's link
shares → the training sizing's collectives; the environment checks (GPU name, power limit, driver)."""

from __future__ import annotations

import json

import pytest
import yaml

from compiler.catalog.catalog import load_catalog
from compiler.pipeline import resolve
from compiler.probe_environment import MINIMUM_DRIVER_MAJOR, POWER_TOLERANCE, environment_warnings, parse_nvidia_smi
from compiler.sizing.train import communication
from tests.conftest import run_cli

TWO_NODES = """name: tiny-two
workload: train
model:
  architecture: {layers: 2, hidden: 64, heads: 4, kv_heads: 2, ffn_hidden: 128, vocab: 256, max_position: 512}
train: {tokens: 10M, seq_len: 64, global_batch: 8}
parallelism: {tp: 1, pp: 1}
cluster: {gpu: h100-sxm-80gb, count: 4, gpus_per_node: 2, scheduler: slurm, slurm: {partition: gpu}%s}
"""
H200 = {"device": "NVIDIA-H200", "power_watts": 700.0, "gpu_id": "h200-sxm-141gb"}


def _cuda(name="NVIDIA H200", driver="550.54.15", watts="700.00 W", cuda="12.4"):
    return {"device": "cuda", "gpu_name": name, "cuda": cuda, "nvidia_smi": f"{name}, {driver}, {watts}"}


@pytest.mark.parametrize("count, per_node, nodes, sizes", [(4, 2, 2, 3), (2, 2, 1, 3), (1, 1, 1, 0), (2, 1, 2, 3)])
def test_probe_collectives_and_nodes_are_decisions_with_reasons(tmp_path, count, per_node, nodes, sizes):
    """Two nodes exactly when the plan spans nodes; collectives whenever more than one rank takes part."""
    from compiler.deployment.probe_collectives import COLLECTIVE_BYTES
    from compiler.probe import probe_files

    text = TWO_NODES.replace("count: 4, gpus_per_node: 2", f"count: {count}, gpus_per_node: {per_node}")
    (tmp_path / "plan.yaml").write_text(text % "")
    plan = resolve(tmp_path / "plan.yaml", probe=True)
    probe, topics = plan.probe, {d.topic: d for d in plan.probe.decisions}
    assert (
        plan.hardware.nodes == nodes
        and probe.nodes == nodes
        and probe.collective_bytes == list(COLLECTIVE_BYTES)[:sizes]
    )
    assert ("nodes over ib-400g" in topics["probe nodes"].reason) == (nodes == 2)
    assert ("doc/PERFORMANCE.md" in topics["probe collectives"].reason) == (sizes > 0)
    assert topics["probe environment checks"].choice == "NVIDIA-H100-80GB-HBM3, 700 W"
    sbatch = next(f.text for f in probe_files(plan).files if f.path == "probe.sbatch")
    assert f"#SBATCH --nodes={nodes}" in sbatch and ("--phase inter-node" in sbatch) == (nodes == 2)


def test_nvidia_smi_line_is_read_and_an_unreported_power_limit_is_none():
    assert parse_nvidia_smi("NVIDIA H200, 550.54.15, 1000.00 W") == {
        "gpu_name": "NVIDIA H200",
        "driver": "550.54.15",
        "power_limit_watts": 1000.0,
    }
    assert parse_nvidia_smi("NVIDIA H200, 550.54.15, [N/A]")["power_limit_watts"] is None
    assert parse_nvidia_smi("") == {} and parse_nvidia_smi("garbage") == {}


def test_environment_checks_name_power_and_driver():
    assert environment_warnings(_cuda(), H200) == []  # the planned GPU at its TDP on a new enough driver
    assert environment_warnings({"device": "cpu"}, H200) == []  # a CPU run records none of these
    # 5% either side of the TDP is rounding; beyond it, a capped (or raised) board
    inside, outside = 700 * (1 + POWER_TOLERANCE) - 1, 700 * (1 + POWER_TOLERANCE) + 1
    assert environment_warnings(_cuda(watts=f"{inside:.2f} W"), H200) == []
    [power] = environment_warnings(_cuda(watts="1000.00 W"), H200)
    assert "1000 W on this node, 700 W in the catalog" in power
    assert len(environment_warnings(_cuda(watts=f"{outside:.2f} W"), H200)) == 1
    [gpu] = environment_warnings(_cuda(name="NVIDIA H100 80GB HBM3", watts="700.00 W"), H200)
    assert "'NVIDIA H100 80GB HBM3'" in gpu and "h200-sxm-141gb" in gpu
    # CUDA 12.x needs driver ≥ 525 (NVIDIA CUDA Compatibility, Table 1): 520 is too old, 525 is not
    assert MINIMUM_DRIVER_MAJOR["12"] == 525
    [driver] = environment_warnings(_cuda(driver="520.61.05"), H200)
    assert "520.61.05 is older than 525" in driver
    assert environment_warnings(_cuda(driver="525.60.13"), H200) == []


def _results(tmp_path, environment, **extra):
    """Version 3 results of the two-node plan's probe on H200 (tests/test_probe_results.py), with this environment."""
    from tests.test_probe_results import synthetic_results

    results = synthetic_results(tmp_path, plan_text=(TWO_NODES % "").replace("h100-sxm-80gb", "h200-sxm-141gb"))
    results.update(device_name=environment.get("gpu_name", "cpu"), environment=environment, expected=H200, **extra)
    path = tmp_path / "probe-results.json"
    path.write_text(json.dumps(results))
    return path


def test_calibrate_repeats_the_environment_warnings_of_a_fabricated_results_file(tmp_path):
    """A 1000 W board where the catalog says 700 W, an H100 where the plan planned an H200, a CUDA 12 torch on a
    CUDA 11 driver: three warnings on stderr and in the site file; the recompiled report names them."""
    path = _results(tmp_path, _cuda(name="NVIDIA H100 80GB HBM3", driver="470.82.01", watts="1000.00 W"))
    result = run_cli("calibrate", path, "-o", tmp_path / "site.yaml", "--site", "lab")
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("[probe-environment]") == 3
    site = yaml.safe_load((tmp_path / "site.yaml").read_text())
    assert [w.split(":")[0] for w in site["warnings"]] == ["GPU", "power limit", "driver"]
    (tmp_path / "plan.yaml").write_text(
        (TWO_NODES % ", calibration: site.yaml").replace("h100-sxm-80gb", "h200-sxm-141gb")
    )
    decision = next(d for d in resolve(tmp_path / "plan.yaml").decisions if d.topic == "site calibration (environment)")
    assert decision.choice == "3 warning(s)" and "1000 W on this node" in decision.reason
    clean = _results(tmp_path, _cuda())
    result = run_cli("calibrate", clean, "-o", tmp_path / "site.yaml", "--site", "lab")
    assert (
        result.returncode == 0
        and "[probe-environment]" not in result.stderr
        and "warnings" not in yaml.safe_load((tmp_path / "site.yaml").read_text())
    )


def test_results_with_unreadable_collectives_are_refused_with_exit_2(tmp_path):
    path = _results(
        tmp_path,
        {"device": "cpu"},
        interconnect="ib-400g",
        processes_per_node=2,
        collectives_intra_node=[{"op": "all_reduce", "bytes": "many"}],
    )
    result = run_cli("calibrate", path, "-o", tmp_path / "site.yaml", "--site", "lab")
    assert (
        result.returncode == 2
        and "collectives_intra_node.0.bytes: Input should be a valid integer" in result.stderr
        and "[invalid-results]" in result.stderr
    )


def test_the_site_link_shares_replace_the_published_ones_in_the_collectives():
    h100 = load_catalog().gpus["h100-sxm-80gb"]
    # DP of 16 over two nodes of 8: the ring crosses nodes at NIC × 8 ranks × the inter-node share, capped by NVLink
    published, crosses = communication.dp_collective_bandwidth(h100, 1, 16, 8, 50e9)
    assert crosses and published == pytest.approx(min(450e9 * 749 / 900, 50e9 * 8 * 0.86))
    site, _ = communication.dp_collective_bandwidth(h100, 1, 16, 8, 50e9, nvlink_fraction=0.8, nic_fraction=0.6)
    assert site == pytest.approx(50e9 * 8 * 0.6)
    inside, crosses = communication.dp_collective_bandwidth(h100, 1, 8, 8, 50e9, nvlink_fraction=0.5)
    assert not crosses and inside == pytest.approx(450e9 * 0.5)


def _site_with_links(tmp_path, intra_bus: float, inter_bus: float, interconnect: str = "ib-400g") -> None:
    plan = tmp_path / "plan.yaml"
    plan.write_text(TWO_NODES % "")
    arch = resolve(plan).model.architecture.model_dump(mode="json")
    point = {
        "gpu": "h100-sxm-80gb",
        "architecture": arch,
        "gpus": 2,
        "global_batch": 2,
        "seq_len": 64,
        "step_seconds": 0.01,
    }
    collective = {"op": "all_reduce", "bytes": 256 << 20, "bus_bytes_per_second": 0.0}
    site = {
        "site": "lab",
        "measured_at": "2026-11-24",
        "source": "fabricated",
        "points": [point],
        "interconnect": {
            "gpu": "h100-sxm-80gb",
            "interconnect": interconnect,
            "device": "cuda",
            "ranks_per_node": 2,
            "intra_node": [
                {**collective, "ranks": 2, "bus_bytes_per_second": intra_bus},
                {**collective, "bytes": 1 << 20, "ranks": 2, "bus_bytes_per_second": intra_bus / 10},
            ],
            "inter_node": [{**collective, "ranks": 4, "bus_bytes_per_second": inter_bus}],
        },
    }
    (tmp_path / "site.yaml").write_text(yaml.safe_dump(site))
    plan.write_text(TWO_NODES % ", calibration: site.yaml")


def test_measured_collectives_become_link_shares_and_the_report_shows_the_comm_terms_before_and_after(tmp_path):
    # the largest all-reduce: 360 GB/s of H100's 450 GB/s NVLink = 0.8; 30 GB/s across two nodes of 2 ranks with one
    # 50 GB/s ib-400g NIC each = 0.3
    _site_with_links(tmp_path, intra_bus=360e9, inter_bus=30e9)
    plan = resolve(tmp_path / "plan.yaml")
    links = next(d for d in plan.decisions if d.topic == "site calibration (interconnect)")
    assert links.choice == "intra-node share 0.832 → 0.8; inter-node share 0.86 → 0.3", links.choice
    assert "all-reduce 256.0 MiB 360 GB/s" in links.reason and "predicted 374 GB/s" in links.reason
    assert "predicted 86 GB/s (2 × 50 GB/s NICs × 0.86)" in links.reason
    terms = next(d for d in plan.decisions if d.topic == "site interconnect shares in this plan")
    assert plan.hardware.nodes == 2 and plan.parallelism.dp == 4 and "DP all-reduce" in terms.reason
    # the fabricated 10 ms step fits a tiny matmul share, so the step's 3 figures hide the comm term: read the term
    term = terms.reason.split("DP all-reduce ", 1)[1].split(";")[0].split(",")[0]
    before, after = (_seconds(x) for x in term.split(" → "))
    assert after > before  # the gradients cross a fabric reaching 0.3 of its NICs instead of 0.86


def _seconds(text: str) -> float:
    value, unit = text.split()
    return float(value) * {"µs": 1e-6, "ms": 1e-3, "s": 1.0}[unit]


def test_link_shares_apply_only_to_the_measured_gpu_and_fabric(tmp_path):
    from compiler.passes.training_request import request_for
    from compiler.site_calibration import calibrate
    from compiler.site_calibration_file import load_site_calibration

    _site_with_links(tmp_path, intra_bus=360e9, inter_bus=30e9, interconnect="roce-400g")
    catalog, _ = calibrate(load_catalog(), load_site_calibration(tmp_path / "site.yaml"))
    plan = resolve(tmp_path / "plan.yaml")  # an ib-400g plan, the fabric measured is roce-400g
    request = request_for(plan, catalog)
    assert request.site_intra_node == ("h100-sxm-80gb", 0.8) and request.inter_node_fraction is None
    from compiler.sizing.train.request import link_fractions

    assert link_fractions(request, "h100-sxm-80gb") == {
        "nvlink_fraction": 0.8,
        "nic_fraction": communication.INTER_NODE_ACHIEVABLE_FRACTION,
    }
    assert (
        link_fractions(request, "a100-sxm-80gb")["nvlink_fraction"] == communication.NVLINK_ACHIEVABLE_FRACTION
    )  # another GPU's links


@pytest.mark.realtool
@pytest.mark.slow
def test_two_node_probe_measures_the_fabric_and_calibrate_prices_it(tmp_path, slurm_cluster):
    """probe.sbatch on the fake cluster's two nodes: the layouts and the collectives on one (2 gloo ranks), the
    collectives again on both (4 ranks); calibrate → link shares; the recompiled plan's comm terms before → after."""
    from tests.test_probe import _run, _runs, cpu_loop_env

    # DDP: the layouts run on the fake nodes' CPUs (Accelerate's FSDP plugin, the search's choice here, needs a GPU)
    ddp = TWO_NODES.replace("global_batch: 8}", "global_batch: 8, framework: ddp}")
    (tmp_path / "plan.yaml").write_text(ddp % "")
    assert run_cli("probe", tmp_path / "plan.yaml", "-o", tmp_path / "out").returncode == 0
    folder = tmp_path / "out" / "tiny-two-probe"
    settings = json.loads((folder / "settings.json").read_text())
    assert settings["nodes"] == 2 and "#SBATCH --nodes=2" in (folder / "probe.sbatch").read_text()
    state, output = _run(folder, cpu_loop_env(slurm_cluster))
    assert state == "COMPLETED", output[-3000:]
    results = json.loads((_runs(folder) / "probe-results.json").read_text())
    assert results["warnings"] == [] and results["expected"]["power_watts"] == 700
    sizes = [b // 64 for b in settings["collective_bytes"]]  # CPU: the sizes ÷ 64
    for key, ranks in (("collectives_intra_node", 2), ("collectives_inter_node", 4)):
        points = results[key]
        assert [(p["op"], p["bytes"]) for p in points] == [
            (op, b) for b in sizes for op in ("all_reduce", "all_gather")
        ]
        for p in points:  # nccl-tests' bus bandwidth: all-reduce algbw × 2(n−1)/n, all-gather algbw × (n−1)/n
            factor = 2 * (ranks - 1) / ranks if p["op"] == "all_reduce" else (ranks - 1) / ranks
            assert p["ranks"] == ranks and p["seconds"] > 0
            assert p["bus_bytes_per_second"] == pytest.approx(p["bytes"] / p["seconds"] * factor)
    assert (
        run_cli(
            "calibrate", _runs(folder) / "probe-results.json", "-o", tmp_path / "site.yaml", "--site", "ci"
        ).returncode
        == 0
    )
    fabric = yaml.safe_load((tmp_path / "site.yaml").read_text())["interconnect"]
    assert fabric["device"] == "cpu" and fabric["ranks_per_node"] == 2 and fabric["interconnect"] == "ib-400g"
    (tmp_path / "plan.yaml").write_text(ddp % ", calibration: site.yaml")
    plan = resolve(tmp_path / "plan.yaml")
    links = next(d for d in plan.decisions if d.topic == "site calibration (interconnect)")
    largest = max((p for p in results["collectives_inter_node"] if p["op"] == "all_reduce"), key=lambda p: p["bytes"])
    share = max(1e-5, largest["bus_bytes_per_second"] / (50e9 * 2))
    assert f"inter-node share 0.86 → {float(f'{share:.4g}'):.4g}" in links.choice and "gloo on a CPU" in links.reason
    terms = next(d for d in plan.decisions if d.topic == "site interconnect shares in this plan")
    assert "DP all-reduce" in terms.reason
