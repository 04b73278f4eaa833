#!/usr/bin/env python3
# Vendored unchanged from the workplace recipe shared/validators/triton/triton_check.py (2026-11-22): see its README there.
"""Parse Triton config.pbtxt files into the real inference.ModelConfig protobuf.

usage: triton_check.py MODEL_REPO_OR_CONFIG...   (exit 1 if any file fails)
       triton_check.py --selftest                 (built-in bad cases, prints errors)

Needs: pip install 'tritonclient[grpc]'   (ships tritonclient/grpc/model_config_pb2.py;
the message is generated from Triton's model_config.proto of the same release).
This is a *schema* check (field names, types, enums, syntax), not Triton's own
semantic validation (ValidateModelConfig in the server), which only a running
tritonserver does; a few of those rules are re-checked below and marked 'semantic'.
"""

import os
import sys

from google.protobuf import json_format, text_format

try:
    from tritonclient.grpc import model_config_pb2 as mc
except (ImportError, RuntimeError):  # tritonclient without the grpc extra: load the file alone
    import importlib.util  # noqa: E401

    import tritonclient

    p = os.path.join(os.path.dirname(tritonclient.__file__), "grpc", "model_config_pb2.py")
    spec = importlib.util.spec_from_file_location("model_config_pb2", p)
    mc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mc)


def parse(text: str) -> "mc.ModelConfig":
    cfg = mc.ModelConfig()
    text_format.Parse(text, cfg)  # raises text_format.ParseError (line:col in message)
    return cfg


def semantic(cfg, dirname=None):
    """A few of tritonserver's own rules (not exhaustive)."""
    errs = []
    if not cfg.backend and not cfg.platform:
        errs.append("neither 'backend' nor 'platform' set")
    if dirname and cfg.name and cfg.name != dirname:
        errs.append(f"name '{cfg.name}' != directory '{dirname}'")
    if cfg.max_batch_size < 0:
        errs.append("max_batch_size < 0")
    for io in list(cfg.input) + list(cfg.output):
        if io.data_type == mc.TYPE_INVALID:
            errs.append(f"{io.name}: data_type missing")
        if not io.dims and not io.HasField("reshape"):
            errs.append(f"{io.name}: dims missing")
    names = [i.name for i in cfg.input]
    if len(names) != len(set(names)):
        errs.append("duplicate input names")
    if cfg.backend == "vllm" and not cfg.model_transaction_policy.decoupled:
        errs.append("vllm backend expects model_transaction_policy { decoupled: true }")
    return errs


def check_file(path):
    d = os.path.basename(os.path.dirname(os.path.abspath(path)))
    try:
        cfg = parse(open(path).read())
    except text_format.ParseError as e:
        print(f"FAIL {path}: ParseError: {e}")
        return False
    errs = semantic(cfg, d)
    kind = cfg.backend or cfg.platform
    print(
        f"{'OK  ' if not errs else 'WARN'} {path}: backend/platform={kind!r} "
        f"inputs={len(cfg.input)} outputs={len(cfg.output)} max_batch_size={cfg.max_batch_size}"
        + (f" semantic: {errs}" if errs else "")
    )
    return True


BAD = {
    "unknown field": 'name: "m" backend: "python" max_batch_sizes: 8',
    "bad enum value": 'name: "m" backend: "python" input [ { name: "x" data_type: TYPE_FLOAT dims: [1] } ]',
    "string for int": 'name: "m" backend: "python" max_batch_size: "8"',
    "bad instance kind": 'name: "m" backend: "python" instance_group [ { kind: KIND_TPU } ]',
    "missing bracket": 'name: "m" backend: "python" input [ { name: "x" data_type: TYPE_FP32 dims: [1] }',
    "repeated scalar twice": 'name: "m" name: "n" backend: "python"',
    "dims as string": 'name: "m" backend: "python" input [ { name: "x" data_type: TYPE_FP32 dims: "4" } ]',
    "parameters wrong shape": 'name: "m" backend: "python" parameters { key: "a" value: "b" }',
    "negative uint": 'name: "m" backend: "python" dynamic_batching { max_queue_delay_microseconds: -1 }',
    "json instead of pbtxt": '{"name": "m", "backend": "python"}',
    # parses fine -- only the server would reject these:
    "semantic only: no backend": 'name: "m" max_batch_size: 4',
    "semantic only: dims empty": 'name: "m" backend: "python" input [ { name: "x" data_type: TYPE_FP32 } ]',
}


def selftest():
    for label, text in BAD.items():
        try:
            cfg = parse(text)
            print(f"[parsed] {label}: semantic={semantic(cfg)}")
        except text_format.ParseError as e:
            print(f"[ParseError] {label}: {e}")
    # JSON form is also accepted by the server (config.pbtxt must be text format, but
    # the HTTP/GRPC model-config APIs speak JSON); json_format gives the equivalent check:
    try:
        json_format.Parse('{"name": "m", "backend": "python", "maxBatchSize": "x"}', mc.ModelConfig())
    except json_format.ParseError as e:
        print(f"[json ParseError] {e}")


def main(argv):
    if argv == ["--selftest"]:
        selftest()
        return 0
    files = []
    for a in argv:
        if os.path.isdir(a):
            for root, _, fs in os.walk(a):
                files += [os.path.join(root, f) for f in fs if f == "config.pbtxt"]
        else:
            files.append(a)
    ok = all([check_file(f) for f in sorted(files)])
    return 0 if ok and files else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
