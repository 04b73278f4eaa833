"""The REPORT target's headline facts: each number the plan decided, with the formula or catalog entry behind it
and, where a published family covers it, the median it was moved to. Not a target itself."""

from __future__ import annotations

from ..plan.resolved import ResolvedPlan
from ..units import format_bytes, format_count, format_seconds, format_usd

VISION_KINDS = ("cnn", "vision-transformer")

NEED_OPEN = "peak traffic ÷ per-replica capacity at the target utilisation"
NEED_CLOSED = "clients at peak ÷ max concurrency, so each client holds a slot"


def _counted(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def median_note(plan: ResolvedPlan, quantity: str, fmt) -> str:
    """How a headline was made the median: ' at P50 (roofline X)', or nothing where no family covers it."""
    found = next((r for r in plan.ranges if r.quantity == quantity), None)
    return f" at P50 (roofline {fmt(found.roofline)})" if found else ""


def _mtp_note(plan: ResolvedPlan) -> str:
    """The MTP modules the launch trains, counted in N and L (sizing/train/flops.py docstring); '' where none."""
    frameworks = plan.deployment.frameworks if plan.deployment else None
    target = frameworks.megatron if frameworks else None
    if not target or not target.mtp_params:
        return ""
    return (
        f"; N and L with the {format_count(target.mtp_params)}-parameter multi-token-prediction module Megatron-LM "
        "trains (--mtp-num-layers; DeepSeek-V3 report §2.2): its layer, 2d → d projection and a second LM-head pass "
        "per token"
    )


def headline_facts(plan: ResolvedPlan) -> list[dict]:
    """The headline numbers, each with the formula or catalog entry behind it."""
    facts = _model_and_hardware_facts(plan) + [_parallelism_fact(plan)]
    if plan.training:
        facts += _training_step_facts(plan) + _training_run_facts(plan)
    if plan.serving and plan.model and plan.model.architecture.kind in VISION_KINDS:
        facts += _vision_serving_facts(plan)
    elif plan.serving:
        facts += _llm_serving_facts(plan)
    return facts


def _model_and_hardware_facts(plan: ResolvedPlan) -> list[dict]:
    """The model's parameter count; the GPUs, their layout and their price."""
    facts = []
    hw = plan.hardware
    if plan.model:
        facts.append(
            {
                "what": "model",
                "value": f"{plan.model.name}, {format_count(plan.model.params_total)} params ({format_count(plan.model.params_active)} active)",
                "source": "parameter count from the architecture (catalog/params.py)",
            }
        )
    if hw:
        layout = (
            f"{_counted(plan.serving.replicas, 'replica')} × {_counted(plan.serving.gpus_per_replica, 'GPU')}"
            if plan.serving
            else f"{_counted(hw.nodes, 'node')} × {hw.gpus_per_node}"
        )
        facts.append(
            {
                "what": "hardware",
                "value": f"{hw.gpus} × {hw.gpu} ({layout})",
                "source": f"catalog: {hw.gpu_spec.source} (as of {hw.gpu_spec.as_of})",
            }
        )
        facts.append(
            {
                "what": "price",
                "value": f"{format_usd(hw.usd_per_gpu_hour)}/GPU-hour {hw.pricing}",
                "source": "catalog price list",
            }
        )
    return facts


def _parallelism_fact(plan: ResolvedPlan) -> dict:
    """A replica's TP×PP and engine (serving), or the training layout the search chose."""
    par = plan.parallelism
    if plan.serving:  # a replica's shape; replicas, batch and engine have their own rows
        return {
            "what": "parallelism",
            "value": f"TP={par.tp} PP={par.pp} per replica, engine {par.framework}",
            "source": "search over memory fit and the SLO",
        }
    layout = "".join(f" {k}={v}" for k, v in (("CP", par.cp), ("EP", par.ep), ("VP", par.vp)) if v > 1)
    layout += " (EP all-to-alls overlapped)" if par.ep_overlap else ""
    if len(set(par.pp_stage_layers)) > 1:
        layout += " layers/stage=" + "/".join(map(str, par.pp_stage_layers))
    layout += f" shard-group={par.shard_group_gpus}" if par.shard_group_gpus else ""
    return {
        "what": "parallelism",
        "value": f"TP={par.tp} PP={par.pp} DP={par.dp}{layout} ZeRO={par.zero_stage} micro-batch={par.micro_batch} grad-accum={par.grad_accum} recompute={par.recompute} framework={par.framework}",
        "source": "search over memory fit and step time",
    }


def _training_step_facts(plan: ResolvedPlan) -> list[dict]:
    """The step time and its roofline terms, the compute term's parts, MFU."""
    t = plan.training
    return [
        {
            "what": "step time",
            "value": f"{format_seconds(t.step_seconds)}{median_note(plan, 'training.step_seconds', format_seconds)}; roofline = compute {format_seconds(t.step_compute_seconds)} + TP comm {format_seconds(t.step_tp_comm_seconds)}"
            + "".join(
                f" + {name} {format_seconds(v)}"
                for name, v in (
                    ("CP K/V exchange", t.step_cp_comm_seconds),
                    ("EP all-to-all", t.step_ep_comm_seconds),
                    ("PP p2p", t.step_pp_p2p_seconds),
                )
                if v
            )
            + f" + PP bubble {format_seconds(t.step_pp_bubble_seconds)} + exposed DP comm {format_seconds(t.step_dp_comm_seconds)}",
            "source": "roofline at the catalog's achievable matmul share; ring all-reduce 2(n−1)/n; bubble (p−1)/(m+p−1), (p−1)/(v·m) of the ideal step interleaved (sizing/train_layout.py)",
        },
        {
            "what": "compute",
            "value": f"{format_seconds(t.step_compute_seconds)} = GEMMs {format_seconds(t.step_matmul_seconds)} + attention {format_seconds(t.step_attention_seconds)} + memory-bound kernels {format_seconds(t.step_memory_bound_seconds)} + weight and gradient traffic {format_seconds(t.step_weight_traffic_seconds)} + optimizer {format_seconds(t.step_optimizer_seconds)}",
            "source": "GEMM FLOPs at the achievable matmul share; flash-attention kernel at its measured share of peak (Dao 2023, Shah et al. 2024); activations, weights and optimizer states through HBM at its achievable share (train_time.py)",
        },
        {
            "what": "MFU",
            "value": f"{100 * t.mfu:.1f}% (HFU {100 * t.hfu:.1f}%) at the roofline step",
            "source": "PaLM appendix B: (6N + 12·L·H·Q·T) × tokens/s ÷ peak; a frozen base (LoRA, QLoRA) counts 4N, plus 6 per adapter parameter (Hu et al. 2021 §4.2)"
            + _mtp_note(plan),
        },
    ]


def _training_run_facts(plan: ResolvedPlan) -> list[dict]:
    """Throughput, wall time and its whole-run terms, checkpoints, cost and budget of the run."""
    t, cost = plan.training, plan.cost
    facts = [
        {
            "what": "throughput",
            "value": f"{format_count(t.tokens_per_second)} tokens/s{median_note(plan, 'training.tokens_per_second', format_count)}, {t.steps} steps",
            "source": "global batch ÷ step time",
        },
        {
            "what": "wall time",
            "value": f"{format_seconds(t.wall_seconds)}{median_note(plan, 'training.wall_seconds', format_seconds)}, {format_count(t.gpu_hours)} GPU-hours{median_note(plan, 'training.gpu_hours', format_count)}; goodput {100 * t.goodput:.1f}%",
            "source": "roofline: steady steps ÷ goodput; goodput = 1 / (1 + the whole-run terms below); P50: × the median actual ÷ predicted (Ranges)",
        },
        {
            "what": "whole-run terms",
            "value": f"per 100 s of steps: failures and restarts {100 * t.whole_run_failures_share:.1f} s, checkpoint writes {100 * t.whole_run_checkpoints_share:.1f} s, stragglers {100 * t.whole_run_stragglers_share:.1f} s, evaluation {100 * t.whole_run_evaluation_share:.1f} s",
            "source": "failures at the per-GPU MTBF and a 10-minute restart (Llama 3 paper §3.3.4), Young–Daly checkpoint interval; the slowest of the job's GPUs at the GPU-to-GPU spread of Sinha et al. 2022 (SC22); Megatron-LM's default evaluation (100 forward iterations every 1000 steps)",
        },
        {
            "what": "checkpoint",
            "value": f"{format_bytes(t.checkpoint_bytes)} every {format_seconds(t.checkpoint_interval_seconds)}, write {format_seconds(t.checkpoint_write_seconds)}, keep {t.checkpoint_keep}",
            "source": "weights + fp32 master + optimizer states; Young–Daly √(2·δ·M)",
        },
        {
            "what": "cost",
            "value": f"{format_usd(cost.usd_total)} total{median_note(plan, 'cost.usd_total', format_usd)}, {format_usd(cost.usd_per_million_tokens)} per 1M tokens",
            "source": "GPU-hours × catalog price",
        },
    ]
    if cost.budget_usd:
        facts.append(
            {
                "what": "budget",
                "value": f"{format_usd(cost.budget_usd)}: headroom {format_usd(cost.budget_usd - cost.usd_total)}, alert at {100 * cost.alert_at:.0f}%",
                "source": "plan budget",
            }
        )
    return facts


def _vision_serving_facts(plan: ResolvedPlan) -> list[dict]:
    """A vision service: batch latency, replicas, monthly cost."""
    s, cost = plan.serving, plan.cost
    return [
        {
            "what": "latency",
            "value": f"p99 {format_seconds(s.ttft_seconds)} (SLO {format_seconds(s.latency_slo_seconds) if s.latency_slo_seconds else 'none'}), batch {s.max_concurrency}, queue delay ≤ {format_seconds(s.max_queue_delay_seconds)}",
            "source": "batch time from the roofline (Why: hardware); dynamic-batching window from the SLO",
        },
        {
            "what": "replicas",
            "value": f"{s.replicas} (autoscale {s.min_replicas}–{s.max_replicas}) × {s.gpus_per_replica} GPU, {format_count(s.tokens_per_second_per_replica)} images/s each",
            "source": f"deployed at peak = max({s.replicas_needed} needed: peak traffic ÷ per-replica capacity at the target utilisation, availability floor {s.replica_floor}); {_load_point(s)}",
        },
        {
            "what": "cost",
            "value": f"{format_usd(cost.usd_per_month)}/month{median_note(plan, 'cost.usd_per_month', format_usd)}",
            "source": "GPU-hours × catalog price, 730 h/month",
        },
    ]


def _llm_serving_facts(plan: ResolvedPlan) -> list[dict]:
    """An LLM service: latency at peak and at other loads, concurrency, replicas, monthly cost and budget."""
    s, cost = plan.serving, plan.cost
    facts = [
        {
            "what": "latency at peak traffic",
            "value": f"TTFT p50/p99 {format_seconds(s.ttft_p50_seconds)}/{format_seconds(s.ttft_seconds)} (SLO {format_seconds(s.ttft_slo_seconds) if s.ttft_slo_seconds else 'none'}), TPOT p50/p99 {format_seconds(s.tpot_p50_seconds)}/{format_seconds(s.tpot_seconds)} (SLO {format_seconds(s.tpot_slo_seconds) if s.tpot_slo_seconds else 'none'}); utilisation {s.utilization_at_peak:.2f}, {s.in_flight_at_peak:.1f} sequences in flight and {s.requests_per_second_at_peak:.3g} req/s per replica{f' from {s.concurrency} closed-loop clients' if s.concurrency else ''}; inter-token latency p50 {format_seconds(s.itl_p50_seconds)}",
            "source": "roofline: prefill FLOPs at achievable matmul rate; decode bytes at achievable HBM bandwidth (fp8 GEMMs at the DeepGEMM-measured shares); decode batch = sequences in flight (Little's law); open loop: M/M/c slot wait; closed loop: rate = clients ÷ (mean TTFT + output × TPOT), a prompt queueing behind the other clients' prefills (M/D/1)",
        },
        {
            "what": "latency, other loads",
            "value": f"one request alone: TTFT {format_seconds(s.ttft_batch1_seconds)}, TPOT {format_seconds(s.tpot_batch1_seconds)}; at max concurrency {s.max_concurrency} and the autoscaler's target utilisation: TTFT {format_seconds(s.ttft_at_capacity_seconds)}, TPOT {format_seconds(s.tpot_at_capacity_seconds)}",
            "source": "the same model at λ → 0 and at the capacity limit",
        },
        {
            "what": "concurrency",
            "value": f"{s.max_concurrency} sequences, KV cache {format_count(s.kv_cache_tokens)} tokens at {s.kv_bytes_per_token} B/token",
            "source": "MLA: (kv_lora_rank + qk_rope_head_dim) × layers × bytes, the compressed latent"
            if plan.model and plan.model.architecture.uses_mla
            else "2 × layers × kv_heads × head_dim × bytes (GQA-aware)",
        },
        {
            "what": "replicas",
            "value": f"{s.replicas} (autoscale {s.min_replicas}–{s.max_replicas}) × {s.gpus_per_replica} GPU, {format_count(s.tokens_per_second_per_replica)} tokens/s each",
            "source": f"deployed at peak = max({s.replicas_needed} needed: {NEED_CLOSED if s.concurrency else NEED_OPEN}, availability floor {s.replica_floor}); {_load_point(s)}",
        },
        {
            "what": "cost",
            "value": f"{format_usd(cost.usd_per_month)}/month{median_note(plan, 'cost.usd_per_month', format_usd)}, {format_usd(cost.usd_per_million_tokens)} per 1M output tokens",
            "source": "GPU-hours × catalog price, 730 h/month",
        },
    ]
    if cost.budget_usd_per_month:
        facts.append(
            {
                "what": "budget",
                "value": f"{format_usd(cost.budget_usd_per_month)}/month: headroom {format_usd(cost.budget_usd_per_month - cost.usd_per_month)}",
                "source": "plan budget",
            }
        )
    return facts


def _load_point(s) -> str:
    """The target utilisation replicas are sized for, and whether the plan pinned it."""
    if s.load_point_pinned:
        return f"target utilisation {s.target_utilization:g} (serve.target_utilization)"
    return f"target utilisation {s.target_utilization:g} (default: Vertex AI's autoscaling target; serve.target_utilization pins another)"
