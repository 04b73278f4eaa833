"""The one place sizing's reasons become English: `words(reason)` for a `sizing.reasons.Reason`.

The searches return codes and figures (bytes, seconds, USD, ids); each code below has one sentence. Passes word
what they put into the resolved plan (decisions, warnings, rejections, infeasible plans); so does anything else
that shows a search's reasons (benchmarks, tests). tests/test_wording.py checks that every code the sizing
modules use is worded here, and nothing else is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from ..plan.resolved import Decision
from ..sizing.reasons import Reason
from ..sizing.train.activations import EAGER_LOSS_LAUNCH_KINDS, loss_for
from ..units import format_count, format_seconds, format_usd

if TYPE_CHECKING:
    from ..plan.resolved import Hardware, Parallelism
    from ..plan.spec import PlanSpec
    from ..sizing.serve.types import ServeCandidate, ServeSearchResult
    from ..sizing.train.candidate import TrainCandidate
    from ..sizing.train.goodput import WholeRun

GIB = 2**30


FUSION_WORDS = {
    "tensorrt": "batch norm, activation and residual add fused into the convolutions, as TensorRT builds them",
    "onnxruntime": "ONNX Runtime folds batch norm into the convolutions; activations and residual adds run as kernels of their own",
    "eager": "batch norm, activation and residual add each a kernel of their own",
}


def words(reason: Reason) -> str:
    return SENTENCES[reason.code](**dict(reason.facts))


def rejection_rows(rejections: Iterable[Any], limit: int | None = None) -> list[tuple[str, str]]:
    """(description, sentence) of each rejection, in order; sorted by both first when `limit` keeps a bounded,
    deterministic sample (the serving searches return every rejection they met)."""
    rows = [(r.description, words(r.reason)) for r in rejections]
    return rows if limit is None else sorted(rows)[:limit]


def _gib(value: float) -> str:
    return f"{value / GIB:.1f} GiB"


def _ms(seconds: float, digits: int) -> str:
    return f"{seconds * 1e3:.{digits}f}"


def _rejection(r: Any) -> str:
    return f"{r.description}: {words(r.reason)}"


def _no_batch_meets_slo(batch: int, ttft: float, ttft_slo: float | None, tpot: float, tpot_slo: float | None) -> str:
    parts = []
    if ttft_slo and ttft > ttft_slo:
        parts.append(f"TTFT p99 {_ms(ttft, 0)} ms > {_ms(ttft_slo, 0)} ms")
    if tpot_slo and tpot > tpot_slo:
        parts.append(f"TPOT p99 {_ms(tpot, 1)} ms > {_ms(tpot_slo, 1)} ms")
    return f"no batch meets the SLO; best at batch {batch}: " + ", ".join(parts)


def _kv_below_context(weights: int, workspace: int, usable: int, kv_tokens: int, context: int) -> str:
    if weights + workspace < usable:
        return (
            f"weights {weights / GIB:.1f} GiB + workspace {workspace / GIB:.1f} GiB of {usable / GIB:.1f} GiB usable "
            f"leave KV for {kv_tokens} tokens < context {context}"
        )
    return f"weights {weights / GIB:.1f} GiB + workspace {workspace / GIB:.1f} GiB exceed {usable / GIB:.1f} GiB usable per GPU"


def _mmc_queue(
    batch: int,
    utilization: float,
    wait: float,
    step: float,
    bound: str,
    gemm: float,
    attention: float,
    elementwise: float,
    comm: float,
    fixed: float = 0.0,
) -> str:
    return (
        f"M/M/c slot wait, c = {batch}, ρ = {utilization:g}: p99 wait {_ms(wait, 1)} ms; decode step {_ms(step, 2)} ms "
        f"({bound}-bound) = GEMMs {_ms(gemm, 2)} + attention {_ms(attention, 2)} + elementwise {_ms(elementwise, 2)} "
        f"+ TP/PP comm {_ms(comm, 2)} + fixed per layer {_ms(fixed, 2)} ms"
    )


def _smallest_fit(fit: tuple[int, str, int, int, str]) -> str:
    gpus, gpu_id, tp, pp, precision = fit
    return f"{gpus} × {gpu_id} (TP{tp} PP{pp}, {precision})"


def _vision_no_gpu(model_id: str, rejections: tuple) -> str:
    first = min(rejections, key=lambda r: (r.description, words(r.reason)), default=None)
    return f"{model_id}: no GPU meets the request" + (f"; e.g. {_rejection(first)}" if first else "")


def _no_fit_memory(closest: Any) -> str:
    return "no configuration fits in GPU memory" + (f" (closest: {_rejection(closest)})" if closest else "")


_FSDP_TP = "FSDP2 × TP × PP (fsdp/fsdp_tp.py)"
# what the FSDP2 path lacks for a model-parallel layout (training.fsdp_tp_missing), and who has it
_FSDP_TP_MISSING = {
    "cp": lambda vp: (
        "framework fsdp runs context parallelism only alone: fsdp/fsdp_tp.py all-gathers K/V over the CP ranks (Llama 3 "
        "§3.3.2) for full weights without TP, PP, adapters or an HSDP group (CP × TP, CP × PP and CP × HSDP are not "
        "built); Megatron-LM has CP with TP and PP (--context-parallel-size: framework megatron or auto)"
    ),
    "ep": lambda vp: (
        f"framework fsdp has no expert parallelism: {_FSDP_TP} shards routed experts like any weight, with no "
        f"all-to-all dispatch; Megatron-LM has EP (--expert-model-parallel-size: framework megatron or auto)"
    ),
    "adapters": lambda vp: (
        f"framework fsdp trains QLoRA only without TP/PP: {_FSDP_TP} trains full weights or LoRA (fsdp/lora_tp.py), "
        f"and a 4-bit base has no DTensor TP path"
    ),
    "offload": lambda vp: (
        f"framework fsdp does not offload with TP/PP/CP: {_FSDP_TP} runs fully_shard on the GPU; DeepSpeed offloads, "
        f"without TP/PP/CP"
    ),
    "zero": lambda vp: (
        f"framework fsdp runs TP/PP/CP only at ZeRO-3: {_FSDP_TP} shards weights, gradients and optimizer states "
        f"(fully_shard); Megatron-LM runs TP/PP/CP at ZeRO-0 or 1 (its distributed optimizer)"
    ),
    "vp-chunks": lambda vp: (
        f"VP{vp} under framework fsdp: {_FSDP_TP} splits each stage into {vp} chunks of at least one layer, and a "
        f"stage has fewer layers"
    ),
    "": lambda vp: (
        f"framework fsdp runs model parallelism only as {_FSDP_TP}: TP and PP/VP, or CP alone, at ZeRO-3, no "
        f"offload, full weights or LoRA, no EP; Megatron-LM has EP"
    ),
}


# what each framework path cannot do (training.framework_gap): the constraint, then the capability behind it
_GAPS = {
    "adapters-model-parallel": lambda framework, detail, vp: (
        f"{detail} with TP/PP/CP/EP: no framework path — the Megatron-LM arguments emitted train full weights only, "
        f"the DeepSpeed configs have no tensor or pipeline parallelism and FSDP2 × TP × PP runs LoRA (not QLoRA) at "
        f"ZeRO-3 without CP or EP (framework fsdp, zero_stage 3)"
    ),
    "model-parallel": lambda framework, detail, vp: (
        f"framework {framework} has no tensor, pipeline, context or expert parallelism in the configs emitted "
        f"(Megatron-LM has)"
    ),
    "fsdp-model-parallel": lambda framework, detail, vp: _FSDP_TP_MISSING[detail](vp),
    "megatron-zero": lambda framework, detail, vp: (
        f"{detail} with model parallelism: no framework path — Megatron-LM shards only optimizer states (ZeRO-1, "
        f"its distributed optimizer) and does not offload"
    ),
    "hsdp-megatron": lambda framework, detail, vp: "an HSDP shard group is FSDP's (HYBRID_SHARD); Megatron-LM has none",
    "hsdp": lambda framework, detail, vp: (
        f"HSDP shard group {detail}: hybrid sharding is FSDP's at ZeRO-3 without offload — the Accelerate FSDP1 "
        f"config within one node (HYBRID_SHARD), {_FSDP_TP} for any group of full or LoRA weights "
        f"(fully_shard over [dp_replicate, dp_shard])"
    ),
    "uneven-split": lambda framework, detail, vp: (
        f"pipeline stages of {detail} layers{f' with VP{vp}' if vp > 1 else ''}: Megatron-LM states only equal "
        f"middle stages with a different first/last{', each divisible by VP' if vp > 1 else ''}"
    ),
    "ddp-sharding": lambda framework, detail, vp: f"{detail}: PyTorch DDP does not shard",
    "fsdp-stage": lambda framework, detail, vp: (
        f"{detail}: FSDP shards gradients (SHARD_GRAD_OP) or everything (FULL_SHARD); CPU offload needs FULL_SHARD"
    ),
    "offload-stage": lambda framework, detail, vp: f"{detail} offload: ZeRO-Offload needs stage 2 or 3",
}


def _gated(value: str, gated: str, quantile: str) -> str:
    """A roofline figure and the one the deadline or budget was checked with, when they differ."""
    return f"roofline {value}" if gated == value else f"roofline {value} ({gated} at {quantile})"


def _over_budget_cheapest(
    cost: float,
    gated: float,
    quantile: str,
    budget: float,
    deadline: float | None,
    gpus: int,
    gpu_id: str,
    pricing: str,
) -> str:
    meeting = f"the {format_seconds(deadline)} deadline" if deadline else "no deadline"
    return (
        f"needs {_gated(format_usd(cost), format_usd(gated), quantile)}, budget {format_usd(budget)}; cheapest meeting {meeting}: "
        f"{gpus} × {gpu_id} {pricing}, {format_usd(cost)}"
    )


# --- the decisions the sizing passes record ------------------------------------------------------------------


def model_choice(name: str, params_total: float, params_active: float) -> str:
    return f"{name}: {params_total / 1e9:.2f}B parameters ({params_active / 1e9:.2f}B active)"


def _memory_choices(spec: PlanSpec) -> str:
    """The plan's memory choices in words (compiler/sizing/train_memory.py docstring has their sources)."""
    train = spec.train
    loss = {
        "standard": "cross-entropy on fp32 logits",
        "chunked": "chunked cross-entropy",
        "fused": "fused cross-entropy",
        "flash-attn": "flash-attn's cross-entropy on 16-bit logits",
    }[loss_for(train.loss, train.method)]
    eager = loss_for(train.loss, train.method) == "standard" and train.entrypoint.kind in EAGER_LOSS_LAUNCH_KINDS
    loss += " (the Hugging Face Trainer's eager loss, 12 B per logit, whatever the framework)" if eager else ""
    parts = [
        loss + (" (auto)" if train.loss == "auto" else ""),
        "fp32 master weights" if train.master_weights == "fp32" else "pure 16-bit weights and optimizer states",
    ]
    if train.optimizer_in_backward:
        parts.append("optimizer step in the backward")
    if train.activation_offload:
        parts.append("checkpointed activations on the host")
    if not train.reshard_after_forward:
        parts.append("FSDP keeps gathered weights to the backward")
    parts.append("expandable segments" if train.expandable_segments else "15% caching-allocator fragmentation reserve")
    return ", ".join(parts)


def _pipeline_unsharded_words(m) -> str:
    """FSDP2 stages under PP: what stays unsharded between micro-batches (train_memory.pipeline_without_sync)."""
    if not m.accumulating:
        return ""
    whole = m.gathered or m.weights  # without reshard_after_forward the weights are whole throughout
    return (
        f", of which {whole / 2**30:.1f} GiB the rank's stages gathered whole and {m.accumulating / 2**30:.1f} "
        "GiB their unsharded fp32 gradients: torch.distributed.pipelining runs every backward without gradient "
        "sync and reduce-scatters once per step (torch 2.13 pipelining/stage.py backward_maybe_with_nosync)"
    )


def _layout_words(c: TrainCandidate) -> str:
    """CP, EP, VP, an uneven split and an HSDP shard group, only where the layout uses them."""
    lay = c.layout
    parts = [f"CP={lay.cp}"] if lay.cp > 1 else []
    parts += [f"EP={lay.ep}"] if lay.ep > 1 else []
    parts += (
        [
            "(all-to-alls overlapped with another micro-batch's compute: DeepSeek-V3 DualPipe §3.2.1, "
            "Megatron-Core --overlap-moe-expert-parallel-comm)"
        ]
        if lay.ep_overlap
        else []
    )
    parts += ["FP8 dispatch (DeepSeek-V3 §3.3.3)"] if lay.ep_dispatch == "fp8" else []
    parts += [f"VP={lay.vp} (interleaved 1F1B)"] if lay.vp > 1 else []
    split = lay.stage_layers
    if len(split) > 1 and len(set(split)) > 1:
        middle = sorted(set(split[1:-1]))
        parts.append(
            f"layers per stage {split[0]} first, {middle[0]} middle, {split[-1]} last"
            if len(middle) == 1
            else "layers per stage " + "/".join(map(str, split))
        )
    parts += [f"FSDP shard group {lay.shard_group} GPUs"] if lay.shard_group else []
    return "".join(" " + p for p in parts)


def training_decisions(
    spec: PlanSpec,
    c: TrainCandidate,
    evaluated: int,
    hardware: Hardware,
    parallelism: Parallelism,
    batch_tokens: float,
    gate: tuple[float, int, str] = (1.0, 0, ""),
    memory: tuple[float, str] = (1.0, ""),
) -> list[Decision]:
    """`batch_tokens`: the tokens per step the plan gave or the default, when it gave no batch in sequences;
    `gate`: the factor time and cost were checked with against deadline and budget, and the rows behind it; `memory`:
    the memory margin and where it comes from (size_training.memory_source)."""
    m, s, tokens = c.memory, c.step, spec.train.total_tokens
    deadline = f"deadline {format_seconds(spec.train.deadline)}" if spec.train.deadline else "no deadline"
    return [
        Decision(
            topic="hardware",
            choice=f"{c.gpus} × {c.gpu_id} ({c.nodes} nodes)",
            reason=f"{'cheapest' if spec.optimize == 'cost' else 'fastest'} of {evaluated} configurations that fit memory and meet the {deadline}"
            + (f" and budget {format_usd(spec.budget.usd)}" if spec.budget.usd else "")
            + (
                f", with time and cost at {spec.train.gate_quantile.upper()} of {gate[2]} ({gate[1]} published rows, "
                f"× {gate[0]:.2f}; train.gate_quantile)"
                if gate[1] and (spec.train.deadline or spec.budget.usd)
                else ""
            ),
        ),
        Decision(
            topic="parallelism",
            choice=f"TP={c.layout.tp} PP={c.layout.pp} DP={c.layout.dp}{_layout_words(c)} ZeRO-{c.layout.zero}, micro-batch {c.layout.micro_batch} × {c.grad_accum} accumulation, recompute {c.layout.recompute}",
            reason=f"{m.total / 2**30:.1f} GiB per GPU of {c.usable_memory_bytes / 2**30:.1f} GiB usable"
            + (f" (the device's ÷ {memory[0]:.2f}: {memory[1]})" if memory[0] > 1 else "")
            + " "
            f"({m.allocated / 2**30:.1f} GiB allocated, {m.reserved / 2**30:.1f} GiB reserved by the caching "
            f"allocator, the rest CUDA context and NCCL)"
            + _pipeline_unsharded_words(m)
            + f"; roofline step {format_seconds(s.total)}",
        ),
        Decision(topic="framework", choice=c.framework, reason=words(c.framework_reason)),
        Decision(
            topic="memory",
            choice=_memory_choices(spec),
            reason="what the memory per GPU assumes of the training script: train.loss, train.master_weights, "
            "train.optimizer_in_backward, train.activation_offload and train.expandable_segments say otherwise",
        ),
        Decision(
            topic="batch",
            choice=f"{parallelism.global_batch} sequences × {spec.train.seq_len} tokens = {format_count(parallelism.global_batch * spec.train.seq_len)} tokens per step",
            reason="as given"
            if spec.train.global_batch
            else f"{format_count(batch_tokens)} tokens rounded to a power-of-two number of sequences so DP × micro-batch divide it",
        ),
        Decision(
            topic="time",
            choice=f"roofline {format_seconds(c.wall_seconds)}, {format_count(c.gpu_hours)} GPU-hours, MFU {100 * c.mfu:.1f}%",
            reason=f"{format_count(tokens)} tokens at {format_count(c.tokens_per_second)} tokens/s, goodput {100 * c.goodput:.1f}% "
            f"({_whole_run_words(c.whole_run)})",
        ),
        Decision(
            topic="cost",
            choice=f"roofline {format_usd(c.cost_usd)}",
            reason=f"{format_count(c.gpu_hours)} GPU-hours × {format_usd(hardware.usd_per_gpu_hour)} ({spec.cluster.pricing})",
        ),
    ]


def _whole_run_words(w: WholeRun) -> str:
    """The whole-run terms as the time decision states them: each one's seconds per 100 seconds of steps."""
    terms = (
        ("failures and restarts", w.failures),
        ("checkpoint writes", w.checkpoints),
        ("stragglers", w.stragglers),
        ("evaluation", w.evaluation),
    )
    return "per 100 s of steps: " + ", ".join(f"{name} {100 * share:.1f} s" for name, share in terms)


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _load(spec: PlanSpec, c: ServeCandidate) -> tuple[str, str]:
    """(the load as the plan states it, how a replica takes it at peak)."""
    traffic = spec.serve.traffic
    sized = c.replicas_needed or c.max_replicas  # the capacity-sized count; a higher floor only lowers latency
    if traffic.concurrency is None:
        return (
            f"{traffic.requests_per_second:g} req/s × peak factor {traffic.peak_factor:g}",
            f"{sized} replicas (the capacity-sized count; a higher floor only lowers latency) at {traffic.requests_per_second * traffic.peak_factor:g} req/s: utilisation "
            f"{c.utilization_at_peak:.2f} of capacity, {c.in_flight_at_peak:.1f} sequences in flight per replica "
            f"(Little's law, decode steps at that batch)",
        )
    clients = traffic.concurrency * traffic.peak_factor / sized
    return (
        f"{traffic.concurrency} closed-loop clients × peak factor {traffic.peak_factor:g} "
        f"({c.requests_per_second:.3g} req/s on average)",
        f"{sized} replicas, {clients:.1f} clients each (closed loop: each sends its next request when the "
        f"previous completes), {c.in_flight_at_peak:.1f} sequences in flight, {c.requests_per_second_at_peak:.3g} req/s per "
        f"replica = clients ÷ (TTFT + output × TPOT) (interactive response-time law); p99 TTFT: all clients starting together",
    )


def serving_decisions(
    spec: PlanSpec, c: ServeCandidate, evaluated: int, hardware: Hardware, prefix: str = "", vision: bool = False
) -> list[Decision]:
    load, at_peak = _load(spec, c)
    if vision:  # images (or items) per batch and request latency: no decode, no tokens
        batch = Decision(
            topic=f"{prefix}batch",
            choice=f"{c.max_concurrency} items per batch",
            reason=f"the largest batch whose p99 request latency ({format_seconds(c.ttft_seconds)}) meets the SLO; "
            f"capacity {format_count(c.tokens_per_second_per_replica)} items/s per replica",
        )
    else:
        batch = Decision(
            topic=f"{prefix}batch",
            choice=f"{c.max_concurrency} concurrent sequences ({c.step_bound}-bound decode)",
            reason=f"{'pinned by serve.max_num_seqs' if spec.serve.max_num_seqs else 'the most requests/s per replica whose latency at peak traffic meets the SLO'}; "
            f"capacity {format_count(c.tokens_per_second_per_replica)} tokens/s per replica at max concurrency",
        )
    return [
        Decision(
            topic=f"{prefix}hardware",
            choice=f"{_plural(c.replicas, 'replica')} × {c.gpus_per_replica} × {c.gpu_id} ({c.precision}, TP={c.tp}, PP={c.pp})",
            reason=f"{'cheapest' if spec.optimize == 'cost' else 'lowest latency'} of {evaluated} configurations meeting the SLO "
            f"at {load}; {words(c.queueing)}" + _floor_words(c),
        ),
        batch,
        *(
            [
                Decision(
                    topic=f"{prefix}latency",
                    choice=f"TTFT p50/p99 {format_seconds(c.ttft_p50_seconds)}/{format_seconds(c.ttft_seconds)}, "
                    f"TPOT p50/p99 {format_seconds(c.tpot_p50_seconds)}/{format_seconds(c.tpot_seconds)} at peak traffic",
                    reason=f"{at_peak}; inter-token latency p50 {format_seconds(c.itl_p50_seconds)} (one decode step); "
                    f"one request alone: TTFT {format_seconds(c.ttft_batch1_seconds)}, TPOT {format_seconds(c.tpot_batch1_seconds)}; "
                    f"at max concurrency and utilisation {c.target_utilization:g}: TTFT {format_seconds(c.ttft_at_capacity_seconds)}, "
                    f"TPOT {format_seconds(c.tpot_at_capacity_seconds)}",
                )
            ]
            if c.ttft_batch1_seconds
            else []
        ),
        *_attention_dp_decisions(c, prefix),
        *_speculation_decisions(c, prefix),
        Decision(
            topic=f"{prefix}cost",
            choice=f"{format_usd(c.usd_per_month)}/month",
            reason=f"{_plural(c.gpus, 'GPU')} × {format_usd(hardware.usd_per_gpu_hour)}/h ({spec.cluster.pricing}) × 730 h",
        ),
    ]


def _speculation_decisions(c: ServeCandidate, prefix: str) -> list[Decision]:
    s = c.speculation
    if s is None:
        return []
    low, high = s.acceptance_range
    expected = [(1 - a ** (s.draft_tokens + 1)) / (1 - a) for a in (low, high)]  # serve_speculative.tokens_per_round
    spread = (
        f"{expected[0]:.2f} at the plan's acceptance {low:g}"
        if low == high
        else f"{expected[0]:.2f}-{expected[1]:.2f} over the published acceptance {low:g}-{high:g} (DeepSeek-V3 report §5.4.3), "
        f"sized at {low:g}"
    )
    return [
        Decision(
            topic=f"{prefix}speculative decoding",
            choice=f"MTP draft, {s.draft_tokens} tokens per step; {expected[0]:.2f} output tokens per verify pass",
            reason=(
                f"serve.speculative: expected tokens per pass (1 − α^(k+1))/(1 − α) (Leviathan et al. 2023): {spread}; decode "
                f"time per output token = (verify pass of k + 1 tokens + k MTP-module steps) ÷ that, so TPOT and ITL are per "
                f"output token (compiler/sizing/serve_speculative.py)"
            ),
        )
    ]


def _attention_dp_decisions(c: ServeCandidate, prefix: str) -> list[Decision]:
    if c.attention_dp <= 1:
        return []
    dp, gpus = c.attention_dp, c.gpus_per_replica
    return [
        Decision(
            topic=f"{prefix}attention data parallelism",
            choice=f"{dp} DP ranks × TP{c.tp} per replica, experts split over {gpus} GPUs; {c.max_concurrency // dp} sequences per rank",
            reason=(
                f"serve.attention_dp: each rank holds the attention and dense layers whole (÷ its TP) with its own KV cache and "
                f"batch, the routed experts ÷ {gpus}: {c.memory.weights / 2**30:.1f} GiB of weights per GPU; every decode step "
                f"all-gathers the {dp} ranks' tokens before the experts and reduce-scatters after (vLLM docs, Data Parallel and "
                f"Expert Parallel Deployment; compiler/sizing/serve_attention_dp.py)"
            ),
        )
    ]


def _floor_words(c: ServeCandidate) -> str:
    if c.replica_floor <= c.replicas_needed:
        return ""
    return (
        f"; capacity needs {_plural(c.replicas_needed, 'replica')} at peak, the availability floor deploys {c.replica_floor} "
        f"(serve.min_replicas or the default policy), which cost and GPU counts include"
    )


def stage_ratio_decision(ratios: list[tuple[str, float]]) -> Decision:
    return Decision(
        topic="stage ratio",
        choice=" : ".join(f"{ratio:.2f} {name}" for name, ratio in ratios),
        reason="each stage sized for the rate it receives; GPUs per GPU of the last stage",
    )


def serving_infeasible(result: ServeSearchResult, where: str) -> str:
    near = (
        f"; nearest: {result.nearest.description}, {format_usd(result.nearest.usd_per_month)}/month"
        if result.nearest
        else ""
    )
    why = words(result.infeasible_reason) if result.infeasible_reason else "no configuration serves this model"
    return f"{where}{why}{near}"


# --- reasons, by code ---------------------------------------------------------------------------------------

SENTENCES: dict[str, Callable[..., str]] = {
    # --- catalog and hardware (both searches) ---------------------------------------------------------------
    "not-in-catalog": lambda: "not in the GPU catalog",
    "no-price": lambda pricing: f"no {pricing} price in the catalog",
    "not-in-catalog-or-no-price": lambda: "not in the GPU catalog or no price for this pricing",
    "no-tensor-cores": lambda gpu_name, precision: f"{gpu_name} has no {precision} tensor cores",
    # --- serving: replica shapes (serve_shapes.py) --------------------------------------------------------------
    "tp-spans-nodes": lambda tp, per_node: f"TP{tp} spans nodes of {per_node} GPUs (TP stays within NVLink)",
    "heads-do-not-split": lambda heads, tp: f"{heads} attention heads do not split over TP{tp}",
    "pp-exceeds-layers": lambda pp, layers: f"PP{pp} exceeds {layers} layers",
    "no-gpu-link": lambda gpu_name: f"{gpu_name} has no GPU-to-GPU link for TP",
    "no-gpu-link-training": lambda gpu_name: (
        f"{gpu_name} has no GPU-to-GPU link in the catalog (intra_node_bandwidth_bytes_per_second 0): a training "
        "collective over more than one GPU cannot be priced; give the link's rate (its PCIe rate where there is no NVLink)"
    ),
    "one-stage-per-node": lambda per_node: f"a replica over nodes runs one PP stage of TP{per_node} per node",
    "tgi-no-pp": lambda: "TGI shards a replica with TP on one node (no PP)",
    "triton-one-node": lambda: "Triton's vLLM backend runs a replica on one node",
    "attention-dp-spans-nodes": lambda dp, tp, per_node: (
        f"attention DP{dp} × TP{tp} spans nodes of {per_node} GPUs (the experts' all-gather stays within NVLink)"
    ),
    # --- serving: one LLM configuration (serve_llm_config.py) ---------------------------------------------------
    "kv-below-context": _kv_below_context,
    "no-batch-meets-slo": _no_batch_meets_slo,
    "mmc-queue": _mmc_queue,
    # --- serving: the LLM search (serve_llm_search.py) ----------------------------------------------------------
    "int4-weight-only": lambda: "int4 (AWQ/GPTQ) is weight-only: matmuls run at the 16-bit rate",
    "latency-over-budget": lambda cheapest: f"optimising latency exceeded the budget; chose the cheapest: {cheapest}",
    "few-requests-in-kv": lambda concurrency, gpu_id: (
        f"KV cache holds only {concurrency} requests per replica on {gpu_id}"
    ),
    "slo-config-over-budget": lambda cheapest, usd, budget: (
        f"the cheapest configuration meeting the SLO, {cheapest}, costs ${usd:,.0f}/month > budget ${budget:,.0f}/month"
    ),
    "no-config-meets-slo": lambda closest, ttft, tpot: (
        f"no configuration meets the SLO; closest is {closest} with TTFT p99 {_ms(ttft, 0)} ms, TPOT p99 {_ms(tpot, 1)} ms"
    ),
    "fits-outside-allowed": lambda model_id, allowed, fit: (
        f"{model_id} does not fit the allowed GPUs ({', '.join(allowed) or 'none'}) and pins; smallest fit: {_smallest_fit(fit)}"
    ),
    "no-gpu-for-precision": lambda precisions, rejection, fit: (
        f"no allowed GPU runs precision {', '.join(precisions)}: {_rejection(rejection)}"
        + (f"; smallest fit: {_smallest_fit(fit)}" if fit else "")
    ),
    "fits-no-gpu": lambda model_id, rejection: (
        f"{model_id} does not fit any GPU configuration; e.g. {_rejection(rejection)}"
    ),
    "no-gpu-to-evaluate": lambda model_id, allowed: (
        f"{model_id}: no GPU to evaluate (allowed: {', '.join(allowed) or 'none'})"
    ),
    # --- serving: non-generative models and edge devices (vision.py) --------------------------------------------
    "vision-weights-exceed": lambda weights, usable: (
        f"weights {weights / GIB:.2f} GiB exceed {usable / GIB:.2f} GiB usable"
    ),
    "batch-one-over-slo": lambda batch_seconds, slo: (
        f"batch 1 takes {_ms(batch_seconds, 2)} ms; 2 × that exceeds the p99 SLO {_ms(slo, 1)} ms"
    ),
    "over-power-budget": lambda devices, tdp, power, budget: (
        f"{devices} devices × {tdp:g} W = {power:g} W > {budget:g} W"
    ),
    "vision-no-gpu": _vision_no_gpu,
    "config-over-budget": lambda cheapest, usd, budget: (
        f"the cheapest configuration, {cheapest}, costs ${usd:,.0f}/month > budget ${budget:,.0f}/month"
    ),
    "dynamic-batching": lambda batch, batch_seconds, delay, roofline=None: (
        f"dynamic batching: batch {batch} takes {_ms(batch_seconds, 2)} ms"
        f"{' (' + words(roofline) + ')' if roofline else ''}; worst case = queue delay {_ms(delay, 2)} ms + 2 batches"
    ),
    "cnn-roofline": lambda layers, memory_bound_layers, traffic_bytes_per_item, compute_seconds, memory_seconds, fusion, fixed_seconds=0.0: (
        f"per-layer roofline over {layers} layers, {memory_bound_layers} of them bandwidth-bound; "
        f"{traffic_bytes_per_item / 1e6:.1f} MB moved per image "
        f"({FUSION_WORDS[fusion]}); "
        f"the layers' compute terms sum to {_ms(compute_seconds, 2)} ms, their traffic terms to {_ms(memory_seconds, 2)} ms"
        + (
            f"; plus {_ms(fixed_seconds, 2)} ms fixed ({fixed_seconds / layers * 1e6:.1f} µs per TensorRT layer on an "
            f"edge device, from MLPerf SingleStream ResNet-50 on Jetson Orin)"
            if fixed_seconds
            else ""
        )
    ),
    # --- serving: multi-stage services (serve_stages.py) --------------------------------------------------------
    "stages-infeasible": lambda failures: "; ".join(f"stage {name}: {words(why)}" for name, why in failures),
    # --- training: the search (training.py) ---------------------------------------------------------------------
    "too-big": lambda total, usable, weights, gradients, optimizer, activations, other: (
        f"{_gib(total)} per GPU > {_gib(usable)} usable (weights {_gib(weights)}, gradients {_gib(gradients)}, "
        f"optimizer {_gib(optimizer)}, activations {_gib(activations)}, runtime {_gib(other)})"
    ),
    "host-memory": lambda needed, host: f"offload needs {_gib(needed)} of host memory per GPU, more than {_gib(host)}",
    "no-tensor-cores-datasheet": lambda dtype: f"no {dtype} tensor cores (datasheet)",
    "edge-not-for-training": lambda: "edge device: not for training",
    "nodes-not-filled": lambda gpus, per_node: f"{gpus} GPUs do not fill nodes of {per_node}",
    "misses-deadline": lambda wall, gated, quantile, deadline: (
        f"{_gated(format_seconds(wall), format_seconds(gated), quantile)} misses the {format_seconds(deadline)} deadline"
    ),
    "over-budget": lambda cost, gated, quantile, budget: (
        f"{_gated(format_usd(cost), format_usd(gated), quantile)} exceeds the {format_usd(budget)} budget"
    ),
    "no-fit-memory": _no_fit_memory,
    "no-framework-path": lambda layout, framework, detail, vp: _GAPS[layout](framework, detail, vp),
    "only-unrunnable-fit": lambda rejection: (
        f"the layouts that fit have no framework path (e.g. {_rejection(rejection)})"
    ),
    "no-runnable-layout": lambda rejection: (
        f"no framework path runs the layouts asked for (e.g. {_rejection(rejection)})"
    ),
    "vp-needs-microbatches": lambda pp, vp: (
        f"VP{vp} needs the micro-batches of a step to be a multiple of PP{pp} (Megatron-LM's interleaved schedule "
        f"runs them in groups of PP)"
    ),
    "fsdp-selective-needs-fsdp2": lambda zero, offload, method: (
        f"selective recompute under framework fsdp is torchtitan's op-level SAC, which only the FSDP2 script "
        f"(fsdp/fsdp_tp.py) applies: it needs ZeRO-3 without offload, full weights, no EP, CP only alone "
        f"(here ZeRO-{zero}{', offload' if offload else ''}, {method}); Accelerate's FSDP1 plugin checkpoints whole "
        f"blocks only (recompute full)"
    ),
    "fsdp-pp-needs-microbatches": lambda pp, microbatches: (
        f"{microbatches} micro-batch(es) per step under PP{pp}: torch.distributed.pipelining's 1F1B needs at least "
        f"one per stage"
    ),
    "no-pipeline-split": lambda pp, layers, first, last: (
        f"{layers} layers have no split over PP{pp}"
        + (
            " with "
            + " and ".join(f"{end} stage {n}" for end, n in (("first", first), ("last", last)) if n)
            + " (the other stages must share the rest equally)"
            if first or last
            else ""
        )
    ),
    "vp-needs-pp": lambda vp: f"VP{vp} interleaves pipeline stages: it needs PP > 1",
    "hsdp-group-divides": lambda shard, ranks: (
        f"an HSDP shard group of {shard} does not tile the {ranks} data-parallel ranks: replicas × shard group must be "
        f"all of them (FSDP's [dp_replicate, dp_shard] mesh)"
    ),
    "ep-overlap-not-allowed": lambda ep, pp, vp, recompute: (
        f"EP all-to-all overlap (parallelism.ep_overlap) needs an MoE model with EP > 1, VP when PP > 1 and no full "
        f"recompute (Megatron-Core's checks of --overlap-moe-expert-parallel-comm); here EP{ep} PP{pp} VP{vp}, "
        f"recompute {recompute}"
    ),
    "ep-needs-moe": lambda ep: (
        f"EP{ep} splits routed experts; this model has none (expert parallelism is for MoE models)"
    ),
    # every GPU refused for a reason other than memory: the first of the reasons in sentence order
    "every-gpu-refused": lambda reasons: min(words(r) for r in reasons),
    "deadline-unreachable": lambda wall, gated, quantile, gpus, gpu_id, pricing, cost, deadline: (
        f"needs {_gated(format_seconds(wall), format_seconds(gated), quantile)} on the fastest configuration "
        f"({gpus} × {gpu_id} {pricing}, {format_usd(cost)}), deadline {format_seconds(deadline)}"
    ),
    "over-budget-cheapest": _over_budget_cheapest,
    "cnn-no-activations": lambda: (
        "no activation_bytes_per_sample for this model (and no layer_table to time it kernel by kernel): its step time "
        "counts FLOPs only and its memory no activations (optimistic; CNN training is mostly memory-bound)"
    ),
    "network-bound": lambda share, interconnect, limit, needed: (
        f"network-bound: the exposed gradient all-reduce is {share:.0%} of the step on {interconnect}; keeping it under "
        f"{limit:.0%} needs {needed / 1e9:.1f} GB/s of NIC per GPU"
    ),
    "storage-too-slow": lambda read, storage, nodes: (
        f"the data loader needs {read / 1e9:.2f} GB/s, more than {storage} gives {nodes} node(s)"
    ),
    # --- training: the framework rule (training.resolve_framework) ----------------------------------------------
    "framework-pinned": lambda: "pinned by the plan",
    "megatron-for-model-parallel": lambda: "tensor/pipeline parallelism needs Megatron-LM's model-parallel layers",
    "deepspeed-for-offload": lambda: "CPU offload of the optimizer (ZeRO-Offload) is DeepSpeed's",
    "ddp-unsharded": lambda: "the model states fit unsharded: plain DDP has the least overhead",
    "fsdp-full-shard": lambda: "full sharding (ZeRO-3) is native in PyTorch FSDP (FULL_SHARD)",
    "fsdp2-tensor-parallel": lambda tp, pp=1, vp=1, cp=1: (
        (
            f"CP{cp} with full sharding (ZeRO-3): FSDP2 on a DeviceMesh [dp_shard, cp, tp] sharding over dp_shard × cp, "
            f"K/V all-gathered over the CP ranks (Llama 3 §3.3.2; fsdp/fsdp_tp.py); Megatron-LM shards only optimizer "
            f"states"
        )
        if cp > 1
        else (
            f"TP{tp} with full sharding (ZeRO-3): FSDP2 × TP on a 2-D DeviceMesh [dp_shard, tp] (torchtitan's "
            f"composition); Megatron-LM shards only optimizer states"
        )
        if pp == 1
        else (
            f"TP{tp} PP{pp} with full sharding (ZeRO-3): FSDP2 × TP × PP on a 3-D DeviceMesh [pp, dp_shard, tp] with "
            f"torch.distributed.pipelining's {'interleaved 1F1B' if vp > 1 else '1F1B'} (torchtitan's composition); "
            f"Megatron-LM shards only optimizer states"
        )
    ),
    "fsdp-hybrid-shard": lambda shard: (
        f"ZeRO-3 inside a shard group of {shard} GPUs, replicated across groups: FSDP HYBRID_SHARD (Accelerate's FSDP1 "
        f"within a node; FSDP2's 2-D mesh [dp_replicate, dp_shard] for other groups)"
    ),
    "deepspeed-zero": lambda zero: (
        f"ZeRO-{zero} sharding of the optimizer{' and gradients' if zero == 2 else ''} (DeepSpeed)"
    ),
    # --- the passes: what the plan asks that no engine or method can do --------------------------------------
    "adapters-need-transformer": lambda method, targets, model: (
        f"{method} adapts transformer projections ({', '.join(targets)}); {model} is a CNN: use method full"
    ),
    "engine-serves-decoders": lambda where, engine, model, kind: (
        f"{where}engine {engine} serves decoder LLMs only; {model} is a {kind}: use engine triton"
    ),
    "tgi-no-fp32": lambda where: f"{where}TGI does not serve fp32 (--dtype takes float16 or bfloat16)",
    "fp32-serving-not-modelled": lambda where: (
        f"{where}serving in fp32 is not modelled (16-bit, fp8, int8 and int4 are): use bf16 or fp16"
    ),
    # --- the model's shape (resolve_model) ---------------------------------------------------------------------
    "preset": lambda preset, source: f"preset {preset} ({source})",
    "architecture-given": lambda: "architecture given in the plan",
    "shape-from-count": lambda layers, hidden, aspect_ratio: (
        f"only a parameter count was given: assumed a Llama-2-like shape with {layers} layers × hidden {hidden} "
        f"(N ≈ 12·L·d², d/L = {aspect_ratio}; Kaplan et al. 2020)"
    ),
    "shape-assumed": lambda why: f"model shape assumed from a parameter count: {words(why)}",
}
