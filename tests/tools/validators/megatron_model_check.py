"""The GPT model Megatron-LM builds from a generated megatron/args.sh, on the meta device, counted.

The words of args.sh (as bash reads them) go through Megatron-LM's own parse_args + validate_args, then its
core_transformer_config_from_args (TransformerConfig, or MLATransformerConfig with --multi-latent-attention) and its
gpt_builders.gpt_builder (pretrain_gpt.py's model: the decoder block spec with the MoE layer pattern, the MTP block)
with --transformer-impl local (Transformer Engine needs a GPU). The model is built whole on one rank: the parallel
sizes and pipeline-split flags are replaced by 1 (they shard the same parameters, the count does not change), after
parallel_state.initialize_model_parallel(1, 1) on a one-process gloo group.

Source: $MEGATRON_LM_SOURCE, a folder with megatron/training and gpt_builders.py (the pinned Megatron-LM tree, or the
vendored core_v0.16.1 subset beside PyPI megatron-core 0.16.1). Only arguments.py and what it imports are loaded
(megatron.training's __init__, which imports the whole training loop, is skipped).

Stood in for on this CPU machine, each found by a failure:
- Triton kernel modules (empty: never called to build a model) and the GPU's compute capability (validate_args asks);
- torch.cuda.current_device, which the MLA YaRN rotary embedding's __init__ calls for the device of its cached
  frequency tables (megatron/core/models/common/embeddings/yarn_rotary_pos_embedding.py): answers "cpu" (buffers,
  not parameters: the count is unchanged);
- MLA's core attention widths (k_channels, v_channels), which megatron-core's local DotProductAttention does not take
  (Transformer Engine's does): dropped, as core attention has no parameters; and its HAVE_TE, which reads True
  without Transformer Engine (multi_latent_attention.py imports a placeholder TELinear): set False;
- the MoE token dispatcher: alltoall opens a CUDA stream, so the model is built with Megatron's default (allgather);
  dispatchers hold no parameters;
- megatron.legacy (vendored subset only): the legacy model module arguments.py's utils import one helper from.

Prints `MEGATRON_MODEL_OK {json}`: parameters, those of the MTP block, the vocabulary Megatron padded to, config.
usage: megatron_model_check.py ARGS_SH
"""

import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import megatron_check  # noqa: E402  (the Triton stand-ins)

# Flags that shard or place the model: replaced so the whole model is built on one rank.
WHOLE_MODEL = {
    "--tensor-model-parallel-size": "1",
    "--pipeline-model-parallel-size": "1",
    "--context-parallel-size": "1",
    "--expert-model-parallel-size": "1",
}
DROPPED = {
    "--account-for-embedding-in-pipeline-split",
    "--account-for-loss-in-pipeline-split",
    "--num-layers-per-virtual-pipeline-stage",
    "--num-virtual-stages-per-pipeline-rank",
    "--decoder-first-pipeline-num-layers",
    "--decoder-last-pipeline-num-layers",
    "--sequence-parallel",
    "--overlap-moe-expert-parallel-comm",
    "--use-distributed-optimizer",
    "--exit-signal-handler",
    "--moe-token-dispatcher-type",  # alltoall opens a CUDA stream; the dispatcher holds no parameters
}
TAKES_VALUE = {
    "--moe-token-dispatcher-type",
    "--num-layers-per-virtual-pipeline-stage",
    "--num-virtual-stages-per-pipeline-rank",
    "--decoder-first-pipeline-num-layers",
    "--decoder-last-pipeline-num-layers",
}


def words_of(args_sh: str) -> list[str]:
    return subprocess.run(
        ["bash", "-c", 'set -euo pipefail; source "$1"; printf "%s\\0" "${MEGATRON_ARGS[@]}"', "_", args_sh],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")[:-1]


def whole_model(words: list[str]) -> list[str]:
    out, skip = [], False
    for word in words:
        if skip:
            skip = False
            continue
        if word in DROPPED:
            skip = word in TAKES_VALUE
            continue
        if word in WHOLE_MODEL:
            out += [word, WHOLE_MODEL[word]]
            skip = True
            continue
        out.append(word)
    return out + [
        "--transformer-impl",
        "local",
        "--use-cpu-initialization",
        "--no-gradient-accumulation-fusion",
        "--no-rope-fusion",
        "--no-persist-layer-norm",
    ]


def local_core_attention_takes_mla_widths() -> None:
    """MLA's layer spec hands its core attention k_channels and v_channels (the q/k and v head widths), which
    Transformer Engine's DotProductAttention takes and megatron-core's local one (0.16.1) does not: the local one is
    given its other arguments. Core attention holds no parameters, so the count is unchanged."""
    from megatron.core.transformer import dot_product_attention

    local = dot_product_attention.DotProductAttention.__init__

    def init(self, *args, k_channels=None, v_channels=None, **kwargs):
        local(self, *args, **kwargs)

    dot_product_attention.DotProductAttention.__init__ = init
    from megatron.core.transformer import multi_latent_attention

    # Its `from megatron.core.extensions.transformer_engine import TELinear` imports without TE (a placeholder, not a
    # class), so HAVE_TE reads True and an isinstance check against it fails: say what is installed.
    multi_latent_attention.HAVE_TE = False


def main() -> None:
    args_sh = sys.argv[1]
    source = Path(os.environ["MEGATRON_LM_SOURCE"])
    words = whole_model(words_of(args_sh))
    sys.meta_path.insert(0, megatron_check._TritonKernels())
    os.environ.update(WORLD_SIZE="1", RANK="0", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 20000))
    import torch

    torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
    torch.cuda.current_device = lambda: "cpu"
    megatron_check.use_source(source)
    from megatron.training import arguments

    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("megatron") and hasattr(module, "get_device_arch_version"):
            module.get_device_arch_version = lambda: 9
    sys.argv = ["pretrain_gpt.py", *words]
    args = arguments.parse_args(ignore_unknown_args=False)
    arguments.validate_args(args, {})
    from megatron.training.tokenizer.tokenizer import _vocab_size_with_padding

    args.padded_vocab_size = _vocab_size_with_padding(args.vocab_size, args, logging_enabled=False)
    from megatron.core import parallel_state
    from megatron.training.global_vars import set_args

    set_args(args)
    torch.distributed.init_process_group("gloo", rank=0, world_size=1)
    parallel_state.initialize_model_parallel(1, 1)
    if args.multi_latent_attention:
        local_core_attention_takes_mla_widths()
    config = arguments.core_transformer_config_from_args(args)
    config.perform_initialization = False
    from gpt_builders import gpt_builder

    with torch.device("meta"):
        model = gpt_builder(args, True, True, config=config)
    mtp = getattr(model, "mtp", None)
    report = {
        "params": sum(p.numel() for p in model.parameters()),
        "mtp_params": sum(p.numel() for p in mtp.parameters()) if mtp is not None else 0,
        "padded_vocab_size": args.padded_vocab_size,
        "config": type(config).__name__,
        "num_moe_experts": config.num_moe_experts,
        "moe_ffn_hidden_size": config.moe_ffn_hidden_size,
        "moe_layer_freq": config.moe_layer_freq
        if isinstance(config.moe_layer_freq, int)
        else sum(config.moe_layer_freq),
        "moe_router_score_function": config.moe_router_score_function,
        "moe_router_enable_expert_bias": config.moe_router_enable_expert_bias,
        "multi_latent_attention": config.multi_latent_attention,
        "position_embedding_type": args.position_embedding_type,
        "untie_embeddings_and_output_weights": args.untie_embeddings_and_output_weights,
        "normalization": config.normalization,
        "gated_linear_unit": config.gated_linear_unit,
        "add_bias_linear": config.add_bias_linear,
        "num_query_groups": config.num_query_groups,
        "mtp_num_layers": config.mtp_num_layers,
    }
    print("MEGATRON_MODEL_OK " + json.dumps(report, default=str, sort_keys=True))


if __name__ == "__main__":
    main()
