"""Target: megatron/args.sh, the Megatron-LM arguments for the plan's parallel layout and model shape.

A bash file that defines the array MEGATRON_ARGS; source it and append "${MEGATRON_ARGS[@]}" to
pretrain_gpt.py's command line (the training entrypoint launched by launch/torchrun.sh). Flag names are
Megatron-LM's (megatron/training/arguments.py). Emitted when TP or PP > 1, or the framework is megatron.
"""

from __future__ import annotations

from typing import Mapping

from ..resolved import ResolvedPlan
from .base import OutputFile, Target, render as render_template

NORMALIZATION = {"rmsnorm": "RMSNorm", "layernorm": "LayerNorm"}


def applies(plan: ResolvedPlan) -> bool:
    par = plan.parallelism
    transformer = plan.model is not None and plan.model.architecture.layers > 0
    return plan.deployment is not None and plan.deployment.launcher is not None and transformer and (par.tp > 1 or par.pp > 1 or par.framework == "megatron")


def megatron_args(plan: ResolvedPlan) -> list[tuple[str, str | None]]:
    """(flag, value) pairs in Megatron-LM's order of argument groups; value None for switches."""
    par, arch, t = plan.parallelism, plan.model.architecture, plan.training
    args: list[tuple[str, str | None]] = [
        ("--tensor-model-parallel-size", str(par.tp)),
        ("--pipeline-model-parallel-size", str(par.pp)),
    ]
    if par.sequence_parallel and par.tp > 1:  # Megatron refuses sequence parallelism without TP
        args.append(("--sequence-parallel", None))
    if par.zero_stage >= 1:  # Megatron's distributed optimizer shards optimizer states over DP (ZeRO-1)
        args.append(("--use-distributed-optimizer", None))
    args += [
        ("--micro-batch-size", str(par.micro_batch)),
        ("--global-batch-size", str(par.global_batch)),
        ("--seq-length", str(t.seq_len)),
        ("--max-position-embeddings", str(max(t.seq_len, arch.max_position))),
        ("--num-layers", str(arch.layers)),
        ("--hidden-size", str(arch.hidden)),
        ("--ffn-hidden-size", str(arch.ffn_hidden)),
        ("--num-attention-heads", str(arch.heads)),
    ]
    if arch.kv_heads and arch.kv_heads < arch.heads:
        args += [("--group-query-attention", None), ("--num-query-groups", str(arch.kv_heads))]
    if arch.head_dim and arch.head_dim != arch.hidden // arch.heads:
        args.append(("--kv-channels", str(arch.head_dim)))
    if arch.is_moe:
        args += [("--num-experts", str(arch.experts)), ("--moe-router-topk", str(arch.experts_per_token))]
    args += [("--position-embedding-type", "rope"), ("--normalization", NORMALIZATION[arch.norm])]
    if arch.gated_mlp:
        args.append(("--swiglu", None))
    if not arch.tied_embeddings:
        args.append(("--untie-embeddings-and-output-weights", None))
    if not arch.attention_bias and not arch.mlp_bias:
        args.append(("--disable-bias-linear", None))
    if par.recompute != "none":
        args.append(("--recompute-granularity", par.recompute))
        if par.recompute == "full":  # recompute every layer from its input
            args += [("--recompute-method", "uniform"), ("--recompute-num-layers", "1")]
    precision = plan.deployment.launcher.precision
    if precision in ("bf16", "fp8"):
        args.append(("--bf16", None))
    elif precision == "fp16":
        args.append(("--fp16", None))
    if precision == "fp8":
        args.append(("--fp8-format", "hybrid"))  # e4m3 forward, e5m2 gradients (Transformer Engine)
    args += [
        ("--train-iters", str(t.steps)),
        ("--save-interval", str(plan.deployment.launcher.checkpoint.interval_steps)),
        ("--save", plan.deployment.launcher.checkpoint.dir),
        ("--load", plan.deployment.launcher.checkpoint.dir),
    ]
    return args


def render(plan: ResolvedPlan, rendered: Mapping[str, OutputFile] | None = None) -> list[OutputFile]:
    lines = [[flag] if value is None else [flag, value] for flag, value in megatron_args(plan)]
    text = render_template("megatron/args.sh.j2", name=plan.name, lines=lines)
    return [OutputFile(plan.deployment.files.megatron_args, text)]


TARGET = Target("megatron", applies, render)
