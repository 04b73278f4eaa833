#!/usr/bin/env python3
"""The parallel layout vLLM itself builds from `vllm serve` arguments: vllm_check.py's parser (beside this file) and
EngineArgs.create_engine_config(), printed as one `PARALLEL {json}` line (data_parallel_size, enable_expert_parallel,
tensor_parallel_size, pipeline_parallel_size, max_num_seqs, speculative_method, num_speculative_tokens,
quantization). Offline, on CPU, config.json planted as vllm_check.py does.

usage: vllm_parallel_config.py [--hf-config MODEL_ID=config.json ...] -- serve MODEL [vllm serve args...]
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import vllm_check  # noqa: E402


def main(argv):
    if "--" in argv:
        argv.remove("--")
    vllm_check._prepare_env(argv)
    from vllm.engine.arg_utils import EngineArgs

    args = vllm_check.build_parser().parse_args(argv)
    if getattr(args, "model_tag", None):
        args.model = args.model_tag
    config = EngineArgs.from_cli_args(args).create_engine_config()
    p, spec = config.parallel_config, config.speculative_config
    print(
        "PARALLEL "
        + json.dumps(
            {
                "quantization": config.model_config.quantization,
                "speculative_method": getattr(spec, "method", None),
                "num_speculative_tokens": getattr(spec, "num_speculative_tokens", None),
                "data_parallel_size": p.data_parallel_size,
                "enable_expert_parallel": p.enable_expert_parallel,
                "tensor_parallel_size": p.tensor_parallel_size,
                "pipeline_parallel_size": p.pipeline_parallel_size,
                "max_num_seqs": config.scheduler_config.max_num_seqs,
            },
            sort_keys=True,
        )
    )


if __name__ == "__main__":
    main(sys.argv[1:])
