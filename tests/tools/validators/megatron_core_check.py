"""megatron-core's TransformerConfig (PyPI megatron-core 0.16.1) built from the words of a generated megatron/args.sh,
as bash reads them: its __post_init__ checks the parallel layout (uneven pipeline split and its divisibility, virtual
stages, context and expert parallelism, query groups). Prints `MEGATRON_CORE_OK {json}` or megatron-core's own error.

usage: megatron_core_check.py ARGS_SH WORLD_SIZE
"""

import json
import subprocess
import sys

# args.sh flag -> TransformerConfig field (values converted by type)
FIELDS = {
    "--num-layers": ("num_layers", int),
    "--hidden-size": ("hidden_size", int),
    "--ffn-hidden-size": ("ffn_hidden_size", int),
    "--num-attention-heads": ("num_attention_heads", int),
    "--num-query-groups": ("num_query_groups", int),
    "--tensor-model-parallel-size": ("tensor_model_parallel_size", int),
    "--pipeline-model-parallel-size": ("pipeline_model_parallel_size", int),
    "--context-parallel-size": ("context_parallel_size", int),
    "--expert-model-parallel-size": ("expert_model_parallel_size", int),
    "--num-experts": ("num_moe_experts", int),
    "--decoder-first-pipeline-num-layers": ("num_layers_in_first_pipeline_stage", int),
    "--decoder-last-pipeline-num-layers": ("num_layers_in_last_pipeline_stage", int),
    "--hidden-dropout": ("hidden_dropout", float),
    "--attention-dropout": ("attention_dropout", float),
    "--norm-epsilon": ("layernorm_epsilon", float),
    "--moe-router-topk": ("moe_router_topk", int),
    "--moe-token-dispatcher-type": ("moe_token_dispatcher_type", str),
}
SWITCHES = {
    "--sequence-parallel": "sequence_parallel",
    "--account-for-embedding-in-pipeline-split": "account_for_embedding_in_pipeline_split",
    "--account-for-loss-in-pipeline-split": "account_for_loss_in_pipeline_split",
    "--bf16": "bf16",
    "--fp16": "fp16",
    "--overlap-moe-expert-parallel-comm": "overlap_moe_expert_parallel_comm",
}

OFF_SWITCHES = {"--disable-bias-linear": "add_bias_linear"}


def main() -> None:
    args_sh, world = sys.argv[1], int(sys.argv[2])
    words = subprocess.run(
        ["bash", "-c", 'set -euo pipefail; source "$1"; printf "%s\\0" "${MEGATRON_ARGS[@]}"', "_", args_sh],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")[:-1]
    import torch
    from megatron.core.transformer import TransformerConfig

    kwargs, raw = {}, {}
    for i, word in enumerate(words):
        if word in FIELDS:
            name, kind = FIELDS[word]
            kwargs[name] = raw[name] = kind(words[i + 1])
        elif word in SWITCHES:
            kwargs[SWITCHES[word]] = True
        elif word in OFF_SWITCHES:
            kwargs[OFF_SWITCHES[word]] = False
    if "--num-layers-per-virtual-pipeline-stage" in words:
        per = int(words[words.index("--num-layers-per-virtual-pipeline-stage") + 1])
        layers, pp = kwargs["num_layers"], kwargs.get("pipeline_model_parallel_size", 1)
        extra = kwargs.get("account_for_embedding_in_pipeline_split", False) + kwargs.get(
            "account_for_loss_in_pipeline_split", False
        )
        kwargs["virtual_pipeline_model_parallel_size"] = (layers + extra) // pp // per
    if "--num-virtual-stages-per-pipeline-rank" in words:
        kwargs["virtual_pipeline_model_parallel_size"] = int(
            words[words.index("--num-virtual-stages-per-pipeline-rank") + 1]
        )
    if kwargs.get("pipeline_model_parallel_size", 1) > 1:
        kwargs["pipeline_dtype"] = (
            torch.bfloat16 if kwargs.get("bf16") else torch.float16 if kwargs.get("fp16") else torch.float32
        )
    config = TransformerConfig(**kwargs)
    model_parallel = (
        config.tensor_model_parallel_size * config.pipeline_model_parallel_size * config.context_parallel_size
    )
    if world % model_parallel:
        sys.exit(f"world size {world} is not a multiple of TP × PP × CP = {model_parallel}")
    print(
        "MEGATRON_CORE_OK "
        + json.dumps(
            {
                **raw,
                "virtual_pipeline_model_parallel_size": config.virtual_pipeline_model_parallel_size,
                "data_parallel_size": world // model_parallel,
                "overlap_moe_expert_parallel_comm": config.overlap_moe_expert_parallel_comm,
            }
        )
    )


if __name__ == "__main__":
    main()
