"""What `accelerate launch ARGS` hands torchrun's agent, computed by accelerate's own code without starting anything.

    python accelerate_launch_check.py -- launch --config_file ... SCRIPT ARGS

Runs the steps of accelerate/commands/launch.py for an FSDP config (launch_command_parser, _validate_launch_command,
prepare_multi_gpu_env, _filter_args onto torch.distributed.run's parser) and torch's config_from_args, then prints

    ACCELERATE_LAUNCH {"rdzv_backend": ..., "rdzv_endpoint": ..., "min_nodes": ..., "max_nodes": ..., ...}
"""

import json
import sys

import torch.distributed.run as distrib_run
from accelerate.commands.launch import _validate_launch_command, launch_command_parser
from accelerate.utils.launch import _filter_args, prepare_multi_gpu_env


def main() -> None:
    argv = sys.argv[sys.argv.index("--") + 1 :]
    assert argv[0] == "launch", argv
    args = launch_command_parser().parse_args(argv[1:])
    args, _, _ = _validate_launch_command(args)
    env = prepare_multi_gpu_env(args)
    agent = _filter_args(
        args,
        distrib_run.get_args_parser(),
        ["--training_script", args.training_script, "--training_script_args", args.training_script_args],
    )
    config, _, _ = distrib_run.config_from_args(agent)
    print(
        "ACCELERATE_LAUNCH "
        + json.dumps(
            {
                "rdzv_backend": config.rdzv_backend,
                "rdzv_endpoint": config.rdzv_endpoint,
                "min_nodes": config.min_nodes,
                "max_nodes": config.max_nodes,
                "nproc_per_node": config.nproc_per_node,
                "max_restarts": config.max_restarts,
                "use_fsdp": env.get("ACCELERATE_USE_FSDP"),
                "sharding_strategy": env.get("FSDP_SHARDING_STRATEGY"),
            },
            sort_keys=True,
        )
    )


if __name__ == "__main__":
    main()
