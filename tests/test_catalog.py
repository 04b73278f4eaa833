"""Catalogs: every preset's computed parameter count matches the published total; GPU entries and overrides."""

import pytest

from compiler.catalog.loader import CatalogError, load_gpus, load_models
from compiler.catalog.params import count_params

MODELS = load_models()
GPU_IDS = {
    "a100-sxm-40gb", "a100-sxm-80gb", "a100-pcie-80gb", "h100-sxm-80gb", "h100-pcie-80gb", "h100-nvl-94gb",
    "h200-sxm-141gb", "b200-sxm-180gb", "l4-24gb", "l40s-48gb", "a10g-24gb", "t4-16gb", "v100-sxm-32gb",
    "mi300x-192gb", "jetson-orin-64gb",
}


@pytest.mark.parametrize("preset", sorted(MODELS), ids=str)
def test_computed_parameter_count_matches_the_published_total(preset):
    entry = MODELS[preset]
    assert count_params(entry.architecture).total == pytest.approx(entry.published_params, rel=0.01)


@pytest.mark.parametrize("preset", sorted(p for p, m in MODELS.items() if m.published_active_params), ids=str)
def test_moe_active_parameters_match_the_published_figure(preset):
    entry = MODELS[preset]
    # "37B activated" (DeepSeek-V3) is stated to two digits: allow its rounding (±0.5B) on top of 1%.
    rounding = 0.5e9 if entry.published_active_params % 1e9 == 0 else 0
    active = count_params(entry.architecture).active
    assert abs(active - entry.published_active_params) <= 0.01 * entry.published_active_params + rounding


def test_hand_checked_counts():
    assert count_params(MODELS["llama-3.1-8b"].architecture).total == 8_030_261_248
    assert count_params(MODELS["llama-2-7b"].architecture).total == 6_738_415_616
    mixtral = count_params(MODELS["mixtral-8x7b"].architecture)
    assert mixtral.per_layer_mlp_total == 8 * 3 * 4096 * 14336 + 4096 * 8  # experts + router
    assert mixtral.per_layer_mlp_active == 2 * 3 * 4096 * 14336 + 4096 * 8


def test_every_required_gpu_is_in_the_catalog_with_a_source():
    gpus = load_gpus()
    assert GPU_IDS <= set(gpus)
    for gpu in gpus.values():
        assert gpu.source and gpu.as_of
        assert "bf16" in gpu.dense_tflops or "fp16" in gpu.dense_tflops
    assert gpus["h100-sxm-80gb"].dense_tflops["bf16"] == 989.4  # dense, not the 1979 sparse figure


def test_a_user_catalog_overrides_a_price_and_adds_a_gpu(tmp_path):
    extra = tmp_path / "gpus.yaml"
    extra.write_text(
        "entries:\n"
        "  - {id: h100-sxm-80gb, price_usd_per_gpu_hour: {spot: 1.23}}\n"
        "  - id: h100-sxm-80gb-onprem\n"
        "    name: our H100s\n"
        "    memory_bytes: 85899345920\n"
        "    memory_bandwidth_bytes_per_second: 3.35e12\n"
        "    dense_tflops: {bf16: 989.4}\n"
        "    intra_node_bandwidth_bytes_per_second: 450e9\n"
        "    gpus_per_node: 8\n"
        "    tdp_watts: 700\n"
        "    price_usd_per_gpu_hour: {on-demand: 1.0, spot: 1.0, reserved: 1.0}\n"
        "    achievable_matmul_fraction: 0.8\n"
        "    achievable_memory_bandwidth_fraction: 0.9\n"
        "    k8s_product_label: NVIDIA-H100-80GB-HBM3\n"
        "    slurm_gres_type: h100\n"
        "    source: our procurement contract\n"
        "    as_of: '2026-01-01'\n"
    )
    gpus = load_gpus(extra)
    assert gpus["h100-sxm-80gb"].price_usd_per_gpu_hour["spot"] == 1.23
    assert gpus["h100-sxm-80gb"].price_usd_per_gpu_hour["on-demand"] == load_gpus()["h100-sxm-80gb"].price_usd_per_gpu_hour["on-demand"]
    assert "h100-sxm-80gb-onprem" in gpus
    assert "h100-sxm-80gb-onprem" not in load_gpus()  # the packaged catalog is untouched


def test_a_broken_user_catalog_is_a_clear_error(tmp_path):
    extra = tmp_path / "gpus.yaml"
    extra.write_text("entries:\n  - {id: new-gpu, name: x}\n")
    with pytest.raises(CatalogError, match="new-gpu"):
        load_gpus(extra)
