"""The resolved plan's training sections from the chosen candidate: hardware, parallelism, memory per GPU, training
(steps, time, checkpoints, goodput) and the Pareto alternatives."""

from __future__ import annotations

from ..plan.resolved import Alternative, Hardware, MemoryPerGpu, Parallelism, Training
from ..sizing.train.candidate import TrainCandidate
from ..sizing.train.layout import Layout


def parallelism_of(layout: Layout, grad_accum: int) -> Parallelism:
    """plan.json's `parallelism` section: the chosen layout as the search decided it."""
    lay = layout
    return Parallelism(
        tp=lay.tp,
        pp=lay.pp,
        dp=lay.dp,
        zero_stage=lay.zero,
        micro_batch=lay.micro_batch,
        grad_accum=grad_accum,
        global_batch=lay.micro_batch * grad_accum * lay.dp,
        recompute=lay.recompute,
        sequence_parallel=lay.sequence_parallel,
        offload_optimizer=lay.offload,
        offload_params=lay.offload_params,
        framework=lay.framework,
        cp=lay.cp,
        ep=lay.ep,
        vp=lay.vp,
        pp_stage_layers=list(lay.stage_layers),
        shard_group_gpus=lay.shard_group,
        ep_overlap=lay.ep_overlap,
    )


def hardware_of(c: TrainCandidate, spec, gpu) -> Hardware:
    return Hardware(
        gpu=c.gpu_id,
        gpus=c.gpus,
        nodes=c.nodes,
        gpus_per_node=c.gpus_per_node,
        gpu_memory_bytes=gpu.memory_bytes,
        interconnect=spec.cluster.interconnect,
        storage=spec.cluster.storage,
        pricing=spec.cluster.pricing,
        usd_per_gpu_hour=c.usd_per_gpu_hour,  # the price of the node its pods land on (deployment/pod_price.py)
        gpu_spec=gpu,
    )


def memory_section(c: TrainCandidate) -> MemoryPerGpu:
    m = c.memory
    return MemoryPerGpu(
        weights=m.weights,
        gradients=m.gradients,
        optimizer=m.optimizer,
        activations=m.activations,
        other=m.other,
        total=m.total,
        usable=c.usable_memory_bytes,
        cpu_offload=m.cpu_offload_bytes,
        allocated=m.allocated,
        reserved=m.reserved,
    )


def training_section(c: TrainCandidate, spec) -> Training:
    tokens = spec.train.total_tokens
    s = c.step
    return Training(
        tokens=tokens,
        seq_len=spec.train.seq_len,
        gate_quantile=spec.train.gate_quantile,
        memory_quantile=spec.train.memory_quantile,
        flops_per_token=c.flops_per_token_model,
        flops_total=c.flops_total,
        steps=c.steps,
        step_seconds=s.total,
        step_compute_seconds=s.compute,
        step_tp_comm_seconds=s.tp_comm,
        step_pp_bubble_seconds=s.pp_bubble,
        step_dp_comm_seconds=s.dp_comm_exposed,
        step_matmul_seconds=s.matmul,
        step_attention_seconds=s.attention,
        step_memory_bound_seconds=s.memory_bound,
        step_weight_traffic_seconds=s.weights,
        step_optimizer_seconds=s.optimizer + s.offload,
        mfu=c.mfu,
        hfu=c.hfu,
        tokens_per_second=c.tokens_per_second,
        wall_seconds=c.wall_seconds,
        gpu_hours=c.gpu_hours,
        goodput=c.goodput,
        deadline_seconds=spec.train.deadline,
        checkpoint_bytes=c.checkpoint_bytes,
        checkpoint_write_seconds=c.checkpoint_write_seconds,
        checkpoint_interval_seconds=c.checkpoint_interval_seconds,
        checkpoint_keep=spec.train.checkpoint.keep,
        checkpoint_dir=spec.train.checkpoint.dir,
        dataset_read_bytes_per_second=c.dataset_read_bytes_per_second,
        allreduce_bytes_per_step=c.allreduce_bytes_per_step,
        network_bytes_per_second_needed=c.network_bytes_per_second_needed,
        step_cp_comm_seconds=s.cp_comm,
        step_ep_comm_seconds=s.ep_comm,
        step_pp_p2p_seconds=s.pp_p2p,
        whole_run_failures_share=c.whole_run.failures,
        whole_run_checkpoints_share=c.whole_run.checkpoints,
        whole_run_stragglers_share=c.whole_run.stragglers,
        whole_run_evaluation_share=c.whole_run.evaluation,
    )


def alternatives_of(c: TrainCandidate, pareto) -> list[Alternative]:
    """The cost/time Pareto front, the chosen layout marked (added where the front does not hold it)."""
    alternatives = [
        Alternative(description=a.description, usd=a.cost_usd, seconds=a.wall_seconds, chosen=a == c) for a in pareto
    ]
    if not any(a.chosen for a in alternatives):
        alternatives.append(Alternative(description=c.description, usd=c.cost_usd, seconds=c.wall_seconds, chosen=True))
    return alternatives
