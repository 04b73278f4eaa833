"""Catalogs: every preset's computed parameter count matches the published total; GPU entries and overrides."""

import pytest

from compiler.catalog.loader import CatalogError, load_gpus, load_models
from compiler.catalog.params import count_params

MODELS = load_models()
GPU_IDS = {
    "a100-sxm-40gb",
    "a100-sxm-80gb",
    "a100-pcie-80gb",
    "h100-sxm-80gb",
    "h100-pcie-80gb",
    "h100-nvl-94gb",
    "h200-sxm-141gb",
    "b200-sxm-180gb",
    "l4-24gb",
    "l40s-48gb",
    "a10g-24gb",
    "t4-16gb",
    "v100-sxm-32gb",
    "mi300x-192gb",
    "jetson-orin-64gb",
    "jetson-orin-nx-16gb",
    "jetson-orin-nano-super-8gb",
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


def test_llama_3_1_8b_terms():
    counts = count_params(MODELS["llama-3.1-8b"].architecture)
    assert counts.per_layer_attention == 4096 * 4096 * 2 + 4096 * 1024 * 2  # q, o full; k, v 8 of 32 heads
    assert counts.per_layer_mlp_total == 3 * 4096 * 14336
    assert counts.per_layer_norm == 2 * 4096
    assert counts.lm_head == 128256 * 4096  # untied
    assert counts.embedding == 2 * 128256 * 4096


def test_deepseek_v3_mla_and_moe_terms():
    counts = count_params(MODELS["deepseek-v3"].architecture)
    q = 7168 * 1536 + 1536 + 1536 * 128 * (128 + 64)  # down, norm, up
    kv = 7168 * (512 + 64) + 512 + 512 * 128 * (128 + 128)
    o = 128 * 128 * 7168
    assert counts.per_layer_attention == q + kv + o == 187_107_328
    expert = 3 * 7168 * 2048
    assert counts.per_layer_mlp_total == 256 * expert + 7168 * 256 + expert  # routed + router + shared
    assert counts.per_layer_mlp_active == 8 * expert + 7168 * 256 + expert


def test_llama_4_maverick_interleaves_dense_and_moe_layers():
    """48 layers, interleave_moe_layer_step 2: layers 1, 3, ..., 47 (24) hold 128 experts + 1 shared of width 8192,
    the other 24 a dense MLP of 16384 (Llama4TextConfig.moe_layers = range(step - 1, layers, step))."""
    arch = MODELS["llama-4-maverick"].architecture
    assert arch.moe_layer_count == 24
    counts = count_params(arch)
    attention, norms = 5120 * 5120 * 2 + 5120 * 1024 * 2, 2 * 5120
    expert, dense = 3 * 5120 * 8192, 3 * 5120 * 16384
    moe_total, moe_active = 128 * expert + 5120 * 128 + expert, expert + 5120 * 128 + expert
    outside = 2 * 202048 * 5120 + 5120  # embedding, untied head, final norm
    assert counts.total == 48 * (attention + norms) + 24 * dense + 24 * moe_total + outside == 400_711_848_960
    assert counts.active == 48 * (attention + norms) + 24 * dense + 24 * moe_active + outside == 17_184_691_200
    every_layer = arch.model_copy(update={"interleave_moe_layer_step": 1})
    assert (
        count_params(every_layer).total == 48 * (attention + norms + moe_total) + outside
    )  # Scout-style: no dense MLP
    assert (
        arch.model_copy(update={"interleave_moe_layer_step": 4, "dense_layers": 3}).moe_layer_count == 12
    )  # 3, 7, ..., 43, 47


def test_bert_counts_its_pooler_and_ties_its_mlm_head():
    counts = count_params(MODELS["bert-large"].architecture)
    assert counts.total == 335_141_888
    assert counts.lm_head == 1024 * 1024 + 1024


def test_vit_l_16_exact():
    counts = count_params(MODELS["vit-l-16"].architecture)
    assert counts.total == 304_326_632
    assert counts.lm_head == 1024 * 1000 + 1000  # 1000-class head


def test_cnns_use_the_published_count():
    counts = count_params(MODELS["resnet-50"].architecture)
    assert counts.total == counts.active == 25_557_032
    assert MODELS["resnet-50"].architecture.gflops_per_sample == pytest.approx(2 * 4.09)  # MACs -> FLOPs


def test_every_required_gpu_is_in_the_catalog_with_a_source():
    gpus = load_gpus()
    assert GPU_IDS <= set(gpus)
    for gpu in gpus.values():
        assert gpu.source and gpu.as_of
        assert "bf16" in gpu.dense_tflops or "fp16" in gpu.dense_tflops
    assert gpus["h100-sxm-80gb"].dense_tflops["bf16"] == 989.4  # dense, not the 1979 sparse figure
    assert gpus["h100-sxm-80gb"].memory_bytes == 80 * 2**30
    assert "bf16" not in gpus["t4-16gb"].dense_tflops and "bf16" not in gpus["v100-sxm-32gb"].dense_tflops
    assert gpus["jetson-orin-64gb"].dense_tflops["int8"] == 170 / 2  # datasheet GPU figure is sparse
    assert gpus["jetson-orin-64gb"].edge and gpus["jetson-orin-64gb"].gpus_per_node == 1
    assert set(gpus["jetson-orin-64gb"].price_usd_per_gpu_hour.values()) == {0}


@pytest.mark.parametrize("gpu_id", sorted(GPU_IDS), ids=str)
def test_gpu_entry_is_consistent(gpu_id):
    gpu = load_gpus()[gpu_id]
    assert gpu.id == gpu_id
    assert 0 < gpu.achievable_matmul_fraction <= 1 and 0 < gpu.achievable_memory_bandwidth_fraction <= 1
    assert set(gpu.price_usd_per_gpu_hour) == {"on-demand", "spot", "reserved"}
    prices = gpu.price_usd_per_gpu_hour
    assert prices["spot"] <= prices["on-demand"] and prices["reserved"] <= prices["on-demand"]
    tflops = gpu.dense_tflops
    if "bf16" in tflops and "fp16" in tflops:
        assert tflops["bf16"] == tflops["fp16"]
    if "fp8" in tflops:  # fp8 runs at twice the bf16 rate (the L40S datasheet prints 362.05 and 733)
        assert tflops["fp8"] == pytest.approx(2 * tflops["bf16"], rel=0.03)


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
    assert (
        gpus["h100-sxm-80gb"].price_usd_per_gpu_hour["on-demand"]
        == load_gpus()["h100-sxm-80gb"].price_usd_per_gpu_hour["on-demand"]
    )
    assert "h100-sxm-80gb-onprem" in gpus
    assert "h100-sxm-80gb-onprem" not in load_gpus()  # the packaged catalog is untouched


def test_a_broken_user_catalog_is_a_clear_error(tmp_path):
    extra = tmp_path / "gpus.yaml"
    extra.write_text("entries:\n  - {id: new-gpu, name: x}\n")
    with pytest.raises(CatalogError, match="new-gpu"):
        load_gpus(extra)


def test_a_user_catalog_can_override_a_model_field_wise(tmp_path):
    extra = tmp_path / "models.yaml"
    extra.write_text("entries:\n  - {id: llama-3.1-8b, architecture: {max_position: 8192}}\n")
    model = load_models(extra)["llama-3.1-8b"]
    assert model.architecture.max_position == 8192
    assert model.architecture.ffn_hidden == 14336  # the rest of the architecture is kept


@pytest.mark.parametrize(
    ("text", "message"),
    [("entries: [1, 2]", "string 'id'"), ("just: text", "'entries' list"), ("entries: [", "invalid YAML")],
)
def test_malformed_user_catalogs_are_clear_errors(tmp_path, text, message):
    extra = tmp_path / "gpus.yaml"
    extra.write_text(text)
    with pytest.raises(CatalogError, match=message):
        load_gpus(extra)


def test_a_missing_user_catalog_is_a_clear_error(tmp_path):
    with pytest.raises(CatalogError, match="cannot read"):
        load_gpus(tmp_path / "absent.yaml")
