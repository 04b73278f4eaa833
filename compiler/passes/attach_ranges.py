"""attach_ranges: every headline prediction with the spread its family of published figures shows.

A family's residuals (compiler/catalog/residuals.yaml, written by benchmarks/residuals.py) are the ratio
actual ÷ predicted at P10 and P90 over its rows. Step time and throughput take the steady-step family; a pre-training
plan's wall time, GPU-hours and cost the published whole pre-training runs (failures, restarts, stragglers and all that
a step leaves out); a fine-tune's, which no published whole run resembles, the steady-step family; a CNN sized layer by
layer all of them the published CNN training rows (train-cnn). A duration, a size
or a cost that grows with it reads predicted × ratio; a rate reads predicted ÷ ratio (so its P10 comes from the P90
ratio). TTFT and TPOT take the published latencies at stated load points (serve-ttft, serve-tpot). A mixture-of-experts
model serves in a regime of its own (every published MoE row lands optimistic, benchmarks/residuals.py): its
throughput, cost and TPOT take the MoE rows (serve-moe-throughput, serve-moe-tpot); no MoE TTFT is published, so its
TTFT takes serve-ttft. A CNN with a
layer table takes the serve-vision family (images/s), or serve-vision-batch1 when it serves batch 1; other vision
models (ViT, CNNs without a table) have no rows: no range. Nor has a serving replica's memory: no published row states
it, and the engines fill their KV cache up to the configured share, so its split shows in serve-throughput (README).
"""

from __future__ import annotations

from ..plan.resolved import Range, ResolvedPlan
from .context import PassContext
from .size_training import step_family, time_family

THROUGHPUT = "serve-throughput"
TTFT = "serve-ttft"
TPOT = "serve-tpot"
MOE_THROUGHPUT = "serve-moe-throughput"
MOE_TPOT = "serve-moe-tpot"
VISION = "serve-vision"
VISION_BATCH1 = "serve-vision-batch1"  # batch-1 rows: launch and framework overhead the roofline leaves out
MEMORY_FAMILY = {"full": "memory-full", "lora": "memory-lora", "qlora": "memory-qlora"}


def _range(ctx: PassContext, quantity: str, predicted: float, family: str, rate: bool = False) -> Range:
    r = ctx.catalog.residuals[family]
    low, high = (predicted / r.p90, predicted / r.p10) if rate else (predicted * r.p10, predicted * r.p90)
    return Range(quantity=quantity, predicted=predicted, p10=low, p90=high, family=family, rows=r.rows)


def _training(plan: ResolvedPlan, ctx: PassContext) -> list[Range]:
    t, method = plan.training, plan.spec.train.method
    arch = plan.model.architecture
    run, step = time_family(plan.workload, arch), step_family(arch)
    ranges = [
        _range(ctx, "training.step_seconds", t.step_seconds, step),
        _range(ctx, "training.wall_seconds", t.wall_seconds, run),
        _range(ctx, "training.gpu_hours", t.gpu_hours, run),
        _range(ctx, "training.tokens_per_second", t.tokens_per_second, step, rate=True),
        _range(ctx, "cost.usd_total", plan.cost.usd_total, run),
    ]
    if plan.memory_per_gpu_bytes.total:
        ranges.append(_range(ctx, "memory_per_gpu_bytes.total", plan.memory_per_gpu_bytes.total, MEMORY_FAMILY[method]))
    return ranges


def _serving(plan: ResolvedPlan, ctx: PassContext) -> list[Range]:
    s = plan.serving
    if not s.tpot_seconds:  # vision: CNNs sized layer by layer have published rows; ViTs and encoders not yet
        if not (plan.model.architecture.kind == "cnn" and plan.model.architecture.layer_table):
            return []
        family = VISION_BATCH1 if s.max_concurrency == 1 else VISION
        ranges = [
            _range(ctx, "serving.tokens_per_second_per_replica", s.tokens_per_second_per_replica, family),
            _range(ctx, "serving.ttft_seconds", s.ttft_seconds, family, rate=True),
        ]
        if plan.cost.usd_per_month:  # owned edge devices cost nothing per month: no spread to show
            ranges.append(_range(ctx, "cost.usd_per_month", plan.cost.usd_per_month, family, rate=True))
        return ranges
    moe = plan.model.architecture.is_moe
    throughput, tpot = (MOE_THROUGHPUT, MOE_TPOT) if moe else (THROUGHPUT, TPOT)
    # a replica's throughput; the replicas, so the monthly cost, scale inversely with it
    return [
        _range(ctx, "serving.tokens_per_second_per_replica", s.tokens_per_second_per_replica, throughput),
        _range(ctx, "serving.ttft_seconds", s.ttft_seconds, TTFT),
        _range(ctx, "serving.tpot_seconds", s.tpot_seconds, tpot),
        _range(ctx, "cost.usd_per_month", plan.cost.usd_per_month, throughput, rate=True),
    ]


def attach_ranges(plan: ResolvedPlan, ctx: PassContext) -> ResolvedPlan:
    if plan.training is not None:
        return plan.model_copy(update={"ranges": _training(plan, ctx)})
    if plan.serving is not None:
        return plan.model_copy(update={"ranges": _serving(plan, ctx)})
    return plan
