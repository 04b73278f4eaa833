"""Megatron-LM's own argument parser and validation (megatron/training/arguments.py: parse_args + validate_args) on
the words of a generated megatron/args.sh, as bash reads them; run with the torch venv's python and PYTHONPATH set to
a Megatron-LM source tree (scripts/install-test-deps.sh puts a pinned one under $MLINFRA_TOOLS/megatron-lm).

What this machine lacks is stood in for, and nothing else (each found by a failure):
- modules that `import triton` at import time (Triton kernels for MoE paged stash and SSM ops; Triton needs a GPU and
  is not installed): empty modules, since argument parsing never calls them;
- typing.override (Python 3.12; the torch venv is 3.11);
- the GPU's compute capability (validate_args asks the device; torch here is CPU-only): MLINFRA_GPU_ARCH (default 9,
  Hopper, the H100/H200 of the examples).
Prints `MEGATRON_OK {json}` with what Megatron derived, or Megatron's own exception and exits non-zero.

Source: $MEGATRON_LM_SOURCE, a whole Megatron-LM tree or the vendored core_v0.16.1 subset (vendor/megatron-lm) beside
PyPI's megatron-core 0.16.1 (`use_source`).

usage: megatron_check.py ARGS_SH WORLD_SIZE [EXTRA ARG...]
"""

import importlib.abc
import importlib.machinery
import json
import os
import subprocess
import sys
import types
import typing
from pathlib import Path

TRITON_MODULES = ("megatron.core.transformer.moe.ops.", "megatron.core.ssm.ops.")
TRITON_MODULE_NAMES = {
    "megatron.core.transformer.moe.ops.paged_stash",
    "megatron.core.transformer.custom_layers.batch_invariant_kernels",  # megatron-core 0.16.1 (PyPI)
}


class _Empty(types.ModuleType):
    __path__: list = []

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args, **kwargs: None


class _TritonKernels(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        if name in TRITON_MODULE_NAMES or name.startswith(TRITON_MODULES):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        return _Empty(spec.name)

    def exec_module(self, module):
        pass


def use_source(source: Path) -> None:
    """Import Megatron-LM from `source`: a whole tree (megatron/core too) as it is, or the vendored core_v0.16.1 subset
    (vendor/megatron-lm) beside PyPI's megatron-core through `_bare_training`."""
    if (source / "megatron" / "core").is_dir():
        sys.path.insert(0, str(source))
    else:
        _bare_training(source)


def _bare_training(source: Path) -> None:
    """megatron.training as a bare package over the source's folder: its modules import, its __init__ does not run."""
    sys.path.insert(0, str(source))  # megatron/ (a namespace package beside PyPI's megatron/core) and gpt_builders.py
    import megatron

    package = types.ModuleType("megatron.training")
    package.__path__ = [str(source / "megatron" / "training")]
    sys.modules["megatron.training"] = package
    megatron.training = package
    if not (source / "megatron" / "legacy").is_dir():
        legacy = types.ModuleType("megatron.legacy.model.module")
        legacy.param_is_not_shared = lambda param: not getattr(param, "shared", False)
        for name in ("megatron.legacy", "megatron.legacy.model"):
            sys.modules[name] = types.ModuleType(name)
        sys.modules["megatron.legacy.model.module"] = legacy
        sys.modules["megatron.legacy"].model = sys.modules["megatron.legacy.model"]
    import megatron.training.global_vars as global_vars

    for name in dir(global_vars):
        if name.startswith("get_"):
            setattr(package, name, getattr(global_vars, name))
    import megatron.training.utils as utils

    for name in ("print_rank_0", "is_last_rank", "print_rank_last"):
        setattr(package, name, getattr(utils, name))


def main() -> None:
    args_sh, world, extra = sys.argv[1], sys.argv[2], sys.argv[3:]
    words = subprocess.run(
        ["bash", "-c", 'set -euo pipefail; source "$1"; printf "%s\\0" "${MEGATRON_ARGS[@]}"', "_", args_sh],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")[:-1]
    sys.meta_path.insert(0, _TritonKernels())
    if not hasattr(typing, "override"):
        typing.override = lambda f: f
    os.environ["WORLD_SIZE"], os.environ["RANK"] = world, "0"
    import torch

    arch = int(os.environ.get("MLINFRA_GPU_ARCH", "9"))
    torch.cuda.get_device_capability = lambda *a, **k: (arch, 0)
    use_source(Path(os.environ["MEGATRON_LM_SOURCE"]))
    from megatron.training.arguments import parse_args, validate_args

    for module in list(sys.modules.values()):
        if getattr(module, "__name__", "").startswith("megatron") and hasattr(module, "get_device_arch_version"):
            module.get_device_arch_version = lambda: arch
    sys.argv = ["pretrain_gpt.py", *words, *extra]
    parsed = parse_args(ignore_unknown_args=False)
    validate_args(parsed, {})
    # What initialize_megatron does next with the batch (megatron/training/global_vars.py set_global_variables): newer
    # releases check the same divisibility inside validate_args, core_v0.16.1 only here.
    from megatron.core.num_microbatches_calculator import init_num_microbatches_calculator

    init_num_microbatches_calculator(
        0,
        parsed.rampup_batch_size,
        parsed.global_batch_size,
        parsed.micro_batch_size,
        parsed.data_parallel_size,
        getattr(parsed, "decrease_batch_size_if_needed", False),
    )
    keys = (
        "tensor_model_parallel_size",
        "pipeline_model_parallel_size",
        "data_parallel_size",
        "num_layers",
        "global_batch_size",
        "micro_batch_size",
        "exit_signal_handler",
        "rotary_base",
        "norm_epsilon",
        "decoder_first_pipeline_num_layers",
        "decoder_last_pipeline_num_layers",
        "hidden_dropout",
        "attention_dropout",
        "save_interval",
        "save",
        "vocab_size",
        "use_rope_scaling",
        "rope_scaling_factor",
        "bf16",
    )
    print("MEGATRON_OK " + json.dumps({k: getattr(parsed, k, None) for k in keys}, default=str, sort_keys=True))


if __name__ == "__main__":
    main()
