"""k8s_serving and serving_rules: numbers from the resolved plan in the right places, hostile strings inert, and the
manifests accepted by real consumers (strict Kubernetes schemas, upstream CRD schemas, a PromQL parser)."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest
import yaml

from compiler.deployment.serving.pods import object_name
from compiler.plan.resolved import MemoryPerGpu, ModelInfo, Stage
from compiler.targets import k8s_serving
from compiler.targets.k8s_serving_scaling import queue_query
from compiler.targets.k8s_serving_unit import serving_units
from compiler.targets.serving_rules import serving_rule_groups
from tests.fixtures.resolved_plans import LLAMA_8B, deployed, serving_plan, training_plan
from tests.tools.kubelet import kubelet_expand
from tests.tools.realtools import tool_python, validate_k8s

GIB = 2**30


# ------------------------------------------------------------------------------------------------ helpers
def _plan(spec: dict | None = None, hardware: dict | None = None, model: dict | None = None, **serving):
    plan = serving_plan(**(spec or {}))
    return deployed(
        plan.model_copy(
            update={
                "serving": plan.serving.model_copy(update=serving),
                "hardware": plan.hardware.model_copy(update=hardware or {}),
                "model": plan.model.model_copy(update=model or {}),
            }
        )
    )


def _multi_node(**extra):
    return _plan(tp=8, pp=2, gpus_per_replica=16, nodes_per_replica=2, startup_seconds=812.3, **extra)


def _k8s(autoscaler="hpa", storage_class=None, image=None) -> dict:
    kube = {"namespace": "serving", "autoscaler": autoscaler}
    if storage_class:
        kube["storage_class"] = storage_class
    if image:
        kube["image"] = image
    return {"cluster": {"scheduler": "kubernetes", "gpus": ["h100-sxm-80gb"], "kubernetes": kube}}


def _files(plan) -> dict[str, str]:
    """k8s_serving's files, given the triton target's (a Triton unit's ConfigMap carries its repository)."""
    from compiler.pipeline import render_files

    return {f.path: f.text for f in render_files(plan, only=("k8s_serving",))}


def _docs(plan) -> list[dict]:
    return list(yaml.safe_load_all(_files(plan)["k8s/serving.yaml"]))


def _one(docs, kind) -> dict:
    found = [d for d in docs if d["kind"] == kind]
    assert len(found) == 1, [d["kind"] for d in docs]
    return found[0]


def _quantity_bytes(text: str) -> int:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    for suffix, factor in units.items():
        if str(text).endswith(suffix):
            return int(float(str(text)[: -len(suffix)]) * factor)
    return int(text)


def _staged_plan():
    """A two-stage service: a Triton vision stage on T4-like GPUs feeding a vLLM caption stage."""
    plan = _plan()
    t4 = deployed(plan.hardware.gpu_spec.model_copy(update={"id": "t4-16gb", "k8s_product_label": "Tesla-T4"}))
    vision = Stage(
        name="vision",
        model=ModelInfo(
            id="vit-l-16",
            name="ViT-L/16",
            hf_id="google/vit-large-patch16-224",
            architecture=LLAMA_8B,
            params_total=304_000_000,
            params_active=304_000_000,
        ),
        hardware=deployed(
            plan.hardware.model_copy(update={"gpu": "t4-16gb", "gpu_spec": t4, "usd_per_gpu_hour": 0.35})
        ),
        serving=deployed(
            plan.serving.model_copy(
                update={
                    "engine": "triton",
                    "min_replicas": 2,
                    "max_replicas": 3,
                    "replica_floor": 2,
                    "queue_target_per_replica": 8,
                    "weights_bytes": 608_000_000,
                    "startup_seconds": 2.5,
                    "ttft_slo_seconds": None,
                    "tpot_slo_seconds": None,
                    "latency_slo_seconds": 0.2,
                }
            )
        ),
        memory_per_gpu_bytes=MemoryPerGpu(),
        usd_per_month=766.5,
        gpus_per_last_stage_gpu=0.5,
    )
    caption = Stage(
        name="caption",
        model=plan.model,
        hardware=plan.hardware,
        serving=plan.serving,
        memory_per_gpu_bytes=plan.memory_per_gpu_bytes,
        usd_per_month=8760,
        gpus_per_last_stage_gpu=1.0,
        queue="llama3-8b-chat-vision-to-caption",
    )
    return deployed(plan.model_copy(update={"stages": [vision, caption]}))


# ------------------------------------------------------------------------------------------------ applies
def test_applies_to_serve_plans_on_kubernetes_only():
    assert k8s_serving.applies(serving_plan())
    assert k8s_serving.applies(serving_plan(cluster={"scheduler": "both", "gpus": ["h100-sxm-80gb"]}))
    assert not k8s_serving.applies(serving_plan(cluster={"scheduler": "slurm", "gpus": ["h100-sxm-80gb"]}))
    assert not k8s_serving.applies(training_plan())


# ------------------------------------------------------------------------------------------------ workload shape
def test_gpus_per_pod_equal_tp_on_one_node():
    docs = _docs(_plan(tp=2, gpus_per_replica=2))
    container = _one(docs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 2
    assert "--tensor-parallel-size=2" in container["args"]
    assert not [d for d in docs if d["kind"] == "LeaderWorkerSet"]


def test_multi_node_replica_is_a_leaderworkerset_of_pp_pods_with_tp_gpus():
    docs = _docs(_multi_node())
    assert not [d for d in docs if d["kind"] == "Deployment"]
    lws = _one(docs, "LeaderWorkerSet")
    template = lws["spec"]["leaderWorkerTemplate"]
    assert template["size"] == 2  # PP stages, one node each
    for role in ("leaderTemplate", "workerTemplate"):
        container = template[role]["spec"]["containers"][0]
        assert container["resources"]["limits"]["nvidia.com/gpu"] == 8  # TP
    leader_script = template["leaderTemplate"]["spec"]["containers"][0]["args"][0]
    words = shlex.split(leader_script)
    assert "--tensor-parallel-size=8" in words and "--pipeline-parallel-size=2" in words
    assert "--distributed-executor-backend=ray" in words
    assert "< 16)" in leader_script  # waits for all 16 GPUs of the replica to join Ray
    service = _one(docs, "Service")
    assert service["spec"]["selector"]["leaderworkerset.sigs.k8s.io/worker-index"] == "0"
    assert _one(docs, "HorizontalPodAutoscaler")["spec"]["scaleTargetRef"]["kind"] == "LeaderWorkerSet"


def test_multi_node_shape_that_does_not_agree_is_refused():
    with pytest.raises(ValueError, match="one pipeline stage per node"):
        k8s_serving.render(_plan(tp=4, pp=4, gpus_per_replica=16, nodes_per_replica=2))


def test_engines_that_cannot_span_nodes_are_refused():
    with pytest.raises(ValueError, match="TGI shards a replica over one node's GPUs only"):
        k8s_serving.render(_multi_node(engine="tgi"))


def test_vllm_args_carry_the_resolved_serving_numbers():
    args = _one(_docs(_plan(precision="fp8", kv_cache_dtype="fp8")), "Deployment")["spec"]["template"]["spec"][
        "containers"
    ][0]["args"]
    for flag in (
        "--max-model-len=8192",
        "--max-num-seqs=64",
        "--max-num-batched-tokens=8192",
        "--gpu-memory-utilization=0.9",
        "--quantization=fp8",
        "--kv-cache-dtype=fp8",
        "--port=8000",
    ):
        assert flag in args


# ------------------------------------------------------------------------------------------------ autoscaling
def test_hpa_bounds_and_target_come_from_sizing():
    plan = _plan(min_replicas=3, max_replicas=11, queue_target_per_replica=2.5)
    hpa = _one(_docs(plan), "HorizontalPodAutoscaler")["spec"]
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (3, 11)
    metric = hpa["metrics"][0]
    assert metric["type"] == "Pods" and metric["pods"]["metric"]["name"] == "vllm_num_requests_waiting"
    assert metric["pods"]["target"] == {"type": "AverageValue", "averageValue": "2500m"}
    assert hpa["behavior"]["scaleUp"]["stabilizationWindowSeconds"] == 0
    assert hpa["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 300  # startup 60 s < the 300 s default


def test_scale_down_window_covers_a_slow_reload():
    hpa = _one(_docs(_multi_node()), "HorizontalPodAutoscaler")["spec"]
    assert hpa["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 813  # ceil(812.3 s of weight loading)


def test_adapter_values_expose_the_queue_metric_under_the_hpa_name():
    values = yaml.safe_load(_files(_plan())["helm/prometheus-adapter-values.yaml"])
    rule = values["rules"]["custom"][0]
    assert rule["seriesQuery"].startswith("vllm:num_requests_waiting{")
    assert rule["name"]["as"] == "vllm_num_requests_waiting"


def test_keda_scaledobject_replaces_the_hpa():
    plan = _plan(spec=_k8s(autoscaler="keda"), min_replicas=2, max_replicas=6, queue_target_per_replica=4)
    files = _files(plan)
    assert "helm/prometheus-adapter-values.yaml" not in files
    docs = list(yaml.safe_load_all(files["k8s/serving.yaml"]))
    assert not [d for d in docs if d["kind"] == "HorizontalPodAutoscaler"]
    scaled = _one(docs, "ScaledObject")["spec"]
    assert (scaled["minReplicaCount"], scaled["maxReplicaCount"]) == (2, 6)
    trigger = scaled["triggers"][0]
    assert trigger["type"] == "prometheus" and trigger["metadata"]["threshold"] == "4"
    assert (
        trigger["metadata"]["query"] == 'sum(vllm:num_requests_waiting{namespace="serving",service="llama3-8b-chat"})'
    )
    assert (
        scaled["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]["scaleDown"]["stabilizationWindowSeconds"]
        == 300
    )


# ------------------------------------------------------------------------------------------------ probes, storage
@pytest.mark.parametrize("startup_seconds, threshold", [(60, 48), (812.3, 199), (0.4, 37)])
def test_startup_probe_budget_covers_the_weight_load(startup_seconds, threshold):
    container = _one(_docs(_plan(startup_seconds=startup_seconds)), "Deployment")["spec"]["template"]["spec"][
        "containers"
    ][0]
    probe = container["startupProbe"]
    assert probe["failureThreshold"] == threshold  # ceil(2 × (ceil(load) + 180 s warm-up) / 10 s)
    assert probe["failureThreshold"] * probe["periodSeconds"] >= startup_seconds + 180
    assert probe["httpGet"] == {"path": "/health", "port": "http"}
    assert container["readinessProbe"]["httpGet"]["path"] == container["livenessProbe"]["httpGet"]["path"] == "/health"


def test_model_cache_on_a_shared_filesystem_is_one_rwx_pvc_at_least_the_weights():
    plan = _plan(spec=_k8s(storage_class="lustre-rwx"), hardware={"storage": "lustre"})
    docs = _docs(plan)
    claim = _one(docs, "PersistentVolumeClaim")
    size = _quantity_bytes(claim["spec"]["resources"]["requests"]["storage"])
    # 16,060,522,496 B × 1.10 = 17,666,574,746 B -> rounded up to 17 GiB = 18,253,611,008 B
    assert size == 17 * GIB and size >= 16_060_522_496 * 1.10
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["spec"]["storageClassName"] == "lustre-rwx"
    volumes = _one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": claim["metadata"]["name"]}} in volumes


def test_model_cache_from_object_storage_is_a_per_pod_ephemeral_claim():
    docs = _docs(_plan())  # fixture storage: s3
    assert not [d for d in docs if d["kind"] == "PersistentVolumeClaim"]
    volumes = {v["name"]: v for v in _one(docs, "Deployment")["spec"]["template"]["spec"]["volumes"]}
    claim = volumes["model-cache"]["ephemeral"]["volumeClaimTemplate"]["spec"]
    assert _quantity_bytes(claim["resources"]["requests"]["storage"]) >= 16_060_522_496
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"


def test_gpu_placement_secrets_and_pdb():
    docs = _docs(_plan())
    pod = _one(docs, "Deployment")["spec"]["template"]["spec"]
    assert pod["nodeSelector"]["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"]["name"] == "hf-token"
    assert "value" not in env["HF_TOKEN"]  # a reference, never the token
    pdb = _one(docs, "PodDisruptionBudget")
    assert pdb["apiVersion"] == "policy/v1" and pdb["spec"]["maxUnavailable"] == 1
    monitor = _one(docs, "ServiceMonitor")["spec"]
    assert monitor["endpoints"][0]["path"] == "/metrics"
    assert monitor["selector"]["matchLabels"].items() <= _one(docs, "Service")["metadata"]["labels"].items()


# ------------------------------------------------------------------------------------------------ output form
def test_documents_in_fixed_kind_order_and_stable_bytes():
    plan = _plan(spec=_k8s(storage_class="x"), hardware={"storage": "lustre"})
    kinds = [d["kind"] for d in _docs(plan)]
    assert kinds == sorted(kinds, key=k8s_serving.KIND_ORDER.index)
    assert kinds[0] == "PodDisruptionBudget" and kinds[-1] == "ServiceMonitor"
    assert _files(plan) == _files(plan)


def test_multi_stage_service_gets_one_deployment_and_autoscaler_per_stage():
    docs = _docs(_staged_plan())
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    assert set(deployments) == {"llama3-8b-chat-vision", "llama3-8b-chat-caption"}
    vision = deployments["llama3-8b-chat-vision"]["spec"]["template"]["spec"]
    assert vision["nodeSelector"]["nvidia.com/gpu.product"] == "Tesla-T4"
    assert vision["containers"][0]["command"] == ["tritonserver"]
    assert vision["containers"][0]["startupProbe"]["httpGet"]["path"] == "/v2/health/ready"
    hpas = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "HorizontalPodAutoscaler"}
    assert (hpas["llama3-8b-chat-vision"]["minReplicas"], hpas["llama3-8b-chat-vision"]["maxReplicas"]) == (
        2,
        3,
    )  # the sizing's floor
    assert hpas["llama3-8b-chat-vision"]["metrics"][0]["pods"]["metric"]["name"] == "nv_inference_pending_request_count"
    assert (hpas["llama3-8b-chat-caption"]["minReplicas"], hpas["llama3-8b-chat-caption"]["maxReplicas"]) == (2, 4)
    monitors = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "ServiceMonitor"}
    assert monitors["llama3-8b-chat-vision"]["endpoints"][0]["port"] == "metrics"  # Triton's port 8002


HOSTILE = "x\"; rm -rf / $(touch /tmp/pwned) `id` ' \\ {{ }} #: - --trust-remote-code"


def test_hostile_strings_stay_single_inert_values():
    plan = _plan(spec=_k8s(image=HOSTILE), model={"hf_id": HOSTILE})
    container = _one(_docs(plan), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == HOSTILE
    argv = [kubelet_expand(word, {"HF_TOKEN": "secret"}) for word in container["command"] + container["args"]]
    assert argv[:3] == ["vllm", "serve", HOSTILE]  # one argv word, no shell, no $(VAR) expansion
    assert "--trust-remote-code" not in argv
    leader = _one(_docs(_multi_node(spec=_k8s(image=HOSTILE), model={"hf_id": HOSTILE})), "LeaderWorkerSet")
    script = kubelet_expand(
        leader["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["args"][0], {}
    )
    words = shlex.split(script)
    assert words[words.index("serve") + 1] == HOSTILE and "--trust-remote-code" not in words
    assert words.count("rm") == 0


def test_the_hf_token_never_reaches_argv_through_kubelet_expansion():
    """A model id naming `$(HF_TOKEN)` would otherwise have the kubelet paste the Secret into the process list."""
    plan = _plan(model={"hf_id": "org/$(HF_TOKEN)"})
    container = _one(_docs(plan), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    defined = {"HF_TOKEN": "hf_secret"}
    assert kubelet_expand(container["args"][0], defined) == "org/$(HF_TOKEN)"
    assert "hf_secret" not in str([kubelet_expand(w, defined) for w in container["args"]])


def test_a_model_id_that_looks_like_a_flag_stays_a_model():
    args = _one(_docs(_plan(model={"hf_id": "--trust-remote-code"})), "Deployment")["spec"]["template"]["spec"][
        "containers"
    ][0]["args"]
    assert args[0] == "./--trust-remote-code" and "--trust-remote-code" not in args


def test_long_or_digit_led_names_become_valid_service_names():
    assert object_name("3b-chat") == "m-3b-chat"
    long_name = object_name("a" * 60, "caption")
    assert len(long_name) <= 63 and long_name == object_name("a" * 60, "caption")


# ------------------------------------------------------------------------------------------------ serving rules
def _rules(plan) -> dict[str, list[dict]]:
    return {g["name"].split(".")[-1]: g["rules"] for g in serving_rule_groups(plan)}


def test_slo_burn_rules_use_the_plan_slos_and_sre_workbook_burn_rates():
    slo = _rules(_plan())["serving-slo"]
    ttft = [r for r in slo if r.get("alert") == "ServingTTFTErrorBudgetBurn"]
    assert [r["labels"]["window"] for r in ttft] == ["1h", "6h", "3d"]
    # 14.4 × 1 % error budget of a p99 target; TTFT SLO 2 s lies between vLLM's 1.0 and 2.5 buckets: (2-1)/(2.5-1)
    assert ttft[0]["expr"].endswith("> 0.144")
    assert 'le="1.0"' in ttft[0]["expr"] and 'le="2.5"' in ttft[0]["expr"] and "* 0.666667" in ttft[0]["expr"]
    assert "vllm:time_to_first_token_seconds_bucket" in ttft[0]["expr"]
    tpot = [r for r in slo if r.get("alert") == "ServingTPOTErrorBudgetBurn"]
    assert 'le="0.05"' in tpot[0]["expr"] and 'le="0.075"' not in tpot[0]["expr"]  # 50 ms is a bound: no interpolation
    assert "time_per_output_token" in tpot[0]["expr"]
    assert tpot[2]["expr"].endswith("> 0.01") and tpot[2]["labels"]["severity"] == "warning"


def test_idle_gpu_rule_waits_for_load_and_scale_down():
    idle = _rules(_plan())["serving-gpus"][0]
    assert idle["for"] == "780s"  # 300 s scale-down window + 48 × 10 s startup budget
    assert idle["expr"].startswith("DCGM_FI_DEV_GPU_UTIL{") and 'pod=~"llama3-8b-chat-.+"' in idle["expr"]


def test_budget_rules_from_cost_section():
    budget = _rules(_plan())["serving-budget"]
    record = budget[0]
    assert record["record"] == "mlinfra:serving_usd_per_month" and "* 4 * 730" in record["expr"]
    alerts = {r["alert"]: r for r in budget[1:]}
    assert alerts["ServingBudgetAlert"]["expr"].endswith("> 16000")  # 0.8 × $20,000
    assert alerts["ServingBudgetExceeded"]["expr"].endswith("> 20000")
    no_budget = serving_plan()
    no_budget = deployed(
        no_budget.model_copy(update={"cost": no_budget.cost.model_copy(update={"budget_usd_per_month": None})})
    )
    assert [r.get("record") for r in _rules(no_budget)["serving-budget"]] == ["mlinfra:serving_usd_per_month"]


def test_staged_rules_price_each_stage_at_its_own_gpu():
    rules = _rules(_staged_plan())
    spend = rules["serving-budget"][0]["expr"]
    assert "* 0.35 * 730" in spend and "* 4 * 730" in spend
    triton = [r for r in rules["serving-slo"] if r.get("alert") == "ServingLatencyMeanAboveP99Slo"]
    assert triton and triton[0]["expr"].endswith("> 0.2")


def test_no_rules_for_training():
    assert serving_rule_groups(training_plan()) == []


# ------------------------------------------------------------------------------------------------ real consumers
def _validate_k8s(paths: list[Path]) -> list[str]:
    """Errors from strict Kubernetes schemas + upstream CRD schemas."""
    return validate_k8s(paths)


def _manifests(tmp_path: Path) -> list[Path]:
    plans = {
        "deployment-hpa": _plan(),
        "deployment-keda-pvc": _plan(spec=_k8s(autoscaler="keda", storage_class="rwx"), hardware={"storage": "lustre"}),
        "lws-hpa": _multi_node(),
        "lws-keda": _multi_node(spec=_k8s(autoscaler="keda")),
        "staged": _staged_plan(),
        "tgi": _plan(engine="tgi", tp=2, gpus_per_replica=2, tpot_slo_seconds=0.05),
    }
    paths = []
    for name, plan in plans.items():
        for path, text in _files(plan).items():
            if path == "k8s/serving.yaml":
                paths.append(tmp_path / f"{name}.yaml")
                paths[-1].write_text(text)
    rules = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": "serving", "namespace": "serving"},
        "spec": {"groups": serving_rule_groups(_staged_plan()) + serving_rule_groups(_plan())},
    }
    paths.append(tmp_path / "rules.yaml")
    paths[-1].write_text(yaml.safe_dump(rules, sort_keys=False))
    return paths


def test_real_validators_accept_every_manifest_kind(tmp_path):
    paths = _manifests(tmp_path)
    kinds = {d["kind"] for p in paths for d in yaml.safe_load_all(p.read_text())}
    assert {
        "Deployment",
        "LeaderWorkerSet",
        "HorizontalPodAutoscaler",
        "ScaledObject",
        "ServiceMonitor",
        "PrometheusRule",
        "PodDisruptionBudget",
        "PersistentVolumeClaim",
        "Service",
    } <= kinds
    assert _validate_k8s(paths) == []


def test_real_validators_reject_a_broken_manifest(tmp_path):
    text = _files(_multi_node())["k8s/serving.yaml"]
    broken = text.replace("maxReplicas:", "maxReplica:").replace("size: 2", "size: two")
    assert broken != text
    path = tmp_path / "broken.yaml"
    path.write_text(broken)
    errors = "\n".join(_validate_k8s([path]))
    assert "maxReplica" in errors and "'two' is not of type 'integer'" in errors


def _promql_parse():
    """PyPI promql-parser 0.11.0 (a Rust port of Prometheus's parser) in the k8s tool venv."""
    python = tool_python("k8s")

    def parse(expr: str):
        run = subprocess.run(
            [str(python), "-c", "import sys, promql_parser; promql_parser.parse(sys.stdin.read())"],
            input=expr,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if run.returncode != 0:
            raise ValueError(run.stderr.strip().splitlines()[-1])

    return parse


def test_every_rule_expression_parses_as_promql():
    parse = _promql_parse()
    exprs = [
        r["expr"]
        for plan in (_plan(), _staged_plan(), _multi_node(), _plan(engine="tgi"))
        for g in serving_rule_groups(plan)
        for r in g["rules"]
    ]
    exprs += [queue_query(u) for u in serving_units(_staged_plan())]
    assert len(exprs) > 20
    for expr in exprs:
        parse(expr)
    with pytest.raises(Exception):  # noqa: B017 - the parser's own error type is not importable here
        parse(exprs[0].replace(")", "", 1))


def test_stages_name_the_queue_between_them():
    from pathlib import Path

    from compiler.pipeline import resolve

    units = serving_units(resolve(Path(__file__).parent.parent / "examples/image-captioning.yaml"))
    assert [u.component for u in units] == ["vision", "caption"]
    assert units[0].output_queue == units[1].input_queue == "image-captioning-vision-to-caption"
    assert units[0].input_queue == "" and units[1].output_queue == ""


# ------------------------------------------------------------------------------------------------ kubectl apply -f k8s/
def test_every_file_under_k8s_is_kubernetes_objects_the_schemas_accept(tmp_path):
    """`kubectl apply -f out/<plan>/k8s/` applies every file there: each document must be a Kubernetes object
    (apiVersion + kind) that the strict schemas and CRDs accept; Helm values live under helm/."""
    from compiler.pipeline import compile_plan
    from tests.conftest import EXAMPLES

    paths, helm = [], []
    for example in EXAMPLES:
        for f in compile_plan(example).files:
            if f.path.startswith("helm/"):
                helm.append(f.path)
            if not f.path.startswith("k8s/"):
                continue
            docs = list(yaml.safe_load_all(f.text))
            assert docs and all(isinstance(d, dict) and d.get("apiVersion") and d.get("kind") for d in docs), (
                f"{example.stem}/{f.path}"
            )
            paths.append(tmp_path / f"{example.stem}-{f.path.replace('/', '-')}")
            paths[-1].write_text(f.text)
    assert paths and "helm/prometheus-adapter-values.yaml" in helm
    assert _validate_k8s(paths) == []


# ------------------------------------------------------------------------------------------------ weights delivery
def _pods(docs) -> list[dict]:
    return [
        t["spec"]
        for d in docs
        if d["kind"] in ("Deployment", "LeaderWorkerSet")
        for t in (
            [d["spec"]["template"]]
            if d["kind"] == "Deployment"
            else [
                d["spec"]["leaderWorkerTemplate"]["leaderTemplate"],
                d["spec"]["leaderWorkerTemplate"]["workerTemplate"],
            ]
        )
    ]


def test_hub_weights_are_downloaded_by_an_init_container_before_any_probe():
    """The fixture downloads 16 GB from the Hub: a startup probe sized for the load alone would restart the pod
    mid-download (CrashLoopBackOff on the first rollout). The download runs unprobed, in an init container."""
    plan = _plan()
    docs = _docs(plan)
    (pod,) = _pods(docs)
    (init,) = pod["initContainers"]
    assert init["name"] == "fetch-weights" and init["args"][0] == "meta-llama/Llama-3.1-8B-Instruct"
    assert "*.safetensors" in init["args"] and "snapshot_download" in init["command"][2]
    assert {"name": "HF_HOME", "value": "/models/hf"} in init["env"] and init["env"][0]["name"] == "HF_TOKEN"
    unit = plan.deployment.kubernetes.serving[0]
    assert unit.weights_source == "hub" and unit.download_bytes_per_second == 100e6
    assert unit.download_seconds == 161  # 16,060,522,496 B ÷ 100 MB/s
    deployment = _one(docs, "Deployment")
    assert deployment["spec"]["progressDeadlineSeconds"] == 161 + unit.startup_budget_seconds + 600
    assert any(d.topic == "weights" and "init container downloads" in d.choice for d in plan.deployment.decisions)


def test_object_store_weights_are_streamed_without_a_download():
    plan = _plan(model={"weights_uri": "s3://bucket/llama3-8b"})
    (pod,) = _pods(_docs(plan))
    assert "initContainers" not in pod
    unit = plan.deployment.kubernetes.serving[0]
    assert (unit.weights_source, unit.fetch_weights, unit.download_seconds) == ("object-store", False, 0)


def test_lws_pods_each_fetch_the_whole_checkpoint_and_load_their_stage():
    plan = _multi_node()
    pods = _pods(_docs(plan))
    assert len(pods) == 2 and all(p["initContainers"][0]["name"] == "fetch-weights" for p in pods)
    unit = plan.deployment.kubernetes.serving[0]
    assert unit.weights_bytes_per_pod == 16_060_522_496 // 2 and unit.load_seconds == 407  # ceil(812.3 s ÷ 2 stages)
    assert unit.model_cache_bytes >= unit.checkpoint_bytes  # every pod downloads the whole checkpoint


def test_a_16_bit_checkpoint_quantized_at_load_is_cached_at_16_bits():
    plan = _plan(precision="fp8", weights_bytes=8_030_261_248)
    unit = plan.deployment.kubernetes.serving[0]
    assert unit.checkpoint_bytes == 2 * 8_030_261_248 and unit.model_cache_bytes >= 2 * 8_030_261_248


# ------------------------------------------------------------------------------------------------ pod resources, lifecycle
def test_pods_request_cpu_and_host_memory_for_loading_the_weights():
    plan = _plan()
    (pod,) = _pods(_docs(plan))
    resources = pod["containers"][0]["resources"]
    # one GPU of p5.48xlarge (the H100's priced node): CPU (192,000 m - 550 m reserve - 500 m daemonsets) / 8 =
    # 23,868 m, unthrottled; memory (2,097,152 MiB - (11 x 100 + 255) - 100 - 1,024 - 5,128 x 2 MiB of EFA huge pages)
    # / 8 = 260,552 MiB
    assert resources["requests"]["cpu"] == "23868m" and "cpu" not in resources["limits"]
    assert resources["requests"]["memory"] == resources["limits"]["memory"] == "260552Mi"
    # it holds the floor: 16,060,522,496 B of weights + 16 GiB overhead + 1 GiB /dev/shm (one GPU: no NCCL peers)
    assert _quantity_bytes(resources["requests"]["memory"]) >= 16_060_522_496 + 17 * GIB
    assert resources["limits"]["nvidia.com/gpu"] == 1
    assert any(d.topic == "pod resources" and "QoS Burstable" in d.choice for d in plan.deployment.decisions)


def test_lws_pods_request_memory_for_their_own_stage():
    pods = _pods(_docs(_multi_node()))
    for pod in pods:
        memory = _quantity_bytes(pod["containers"][0]["resources"]["requests"]["memory"])
        assert memory == 2_084_417 * 2**20  # all 8 GPUs of p5.48xlarge: its whole allocatable memory (EFA pages out)
        assert memory >= 16_060_522_496 // 2 + 31 * GIB  # the stage's weights + 16 GiB overhead + 15 GiB /dev/shm
        assert pod["containers"][0]["resources"]["requests"]["cpu"] == "190950m"  # 192 vCPU - 550 m - 500 m


def test_termination_waits_for_the_longest_generation_after_leaving_the_service():
    plan = _plan(ttft_at_capacity_seconds=1.2, tpot_at_capacity_seconds=0.04)
    (pod,) = _pods(_docs(plan))
    # 15 s preStop + ceil(1.2 s + (8192 - 1500) tokens × 0.04 s) = 15 + 269
    assert pod["terminationGracePeriodSeconds"] == 15 + 269
    assert pod["containers"][0]["lifecycle"]["preStop"]["exec"]["command"] == ["sleep", "15"]


def test_tgi_grace_period_stops_at_the_launchers_90_s_drain_and_says_so():
    spec = {
        **serving_plan().spec.model_dump(exclude_none=True),
        "serve": {**serving_plan().spec.serve.model_dump(exclude_none=True), "engine": "tgi"},
    }
    plan = _plan(
        spec={k: spec[k] for k in ("serve",)}, engine="tgi", ttft_at_capacity_seconds=1.2, tpot_at_capacity_seconds=0.04
    )
    (pod,) = _pods(_docs(plan))
    assert pod["terminationGracePeriodSeconds"] == 15 + 90  # not 15 + 269: TGI kills its router 90 s after SIGTERM
    (unit,) = plan.deployment.kubernetes.serving
    assert (unit.drain_seconds, unit.longest_request_seconds) == (90, 269)
    assert any("TGI drains for at most 90 s" in w for w in plan.warnings)
    short = _plan(
        spec={k: spec[k] for k in ("serve",)},
        engine="tgi",
        ttft_at_capacity_seconds=1.2,
        tpot_at_capacity_seconds=0.001,
    )
    assert _pods(_docs(short))[0]["terminationGracePeriodSeconds"] == 15 + 8  # ceil(1.2 + 6692 × 0.001)
    assert not any("TGI drains" in w for w in short.warnings)


@pytest.mark.parametrize("autoscaler", ["hpa", "keda"])
def test_min_replicas_reaches_the_autoscaler(autoscaler):
    """The floor is the sizing's (counted in cost, tests/test_serving_search.py); the autoscaler takes its bounds."""
    spec = _k8s(autoscaler=autoscaler)
    default = _plan(spec=spec, min_replicas=2, max_replicas=4, replica_floor=2, replicas_needed=4)
    given = _plan(
        spec={**spec, "serve": {**serving_plan().spec.serve.model_dump(exclude_none=True), "min_replicas": 3}},
        min_replicas=3,
        max_replicas=4,
        replica_floor=3,
        replicas_needed=4,
    )
    kind, low = (
        ("HorizontalPodAutoscaler", "minReplicas") if autoscaler == "hpa" else ("ScaledObject", "minReplicaCount")
    )
    assert _one(_docs(default), kind)["spec"][low] == 2
    assert _one(_docs(given), kind)["spec"][low] == 3
    assert any(d.topic == "replicas" and "serve.min_replicas as given" in d.reason for d in given.deployment.decisions)
    (floor,) = [d for d in default.deployment.decisions if d.topic == "replicas"]
    assert "availability floor 2" in floor.reason and "max(4 needed, floor 2)" in floor.reason


def test_multi_node_pods_on_infiniband_request_rdma_and_set_nccl():
    plan = _multi_node(hardware={"interconnect": "ib-400g"})
    for pod in _pods(_docs(plan)):
        c = pod["containers"][0]
        assert c["resources"]["limits"]["rdma/rdma_shared_device_a"] == 1
        assert c["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
        assert {"name": "NCCL_IB_DISABLE", "value": "0"} in c["env"]
    assert any(d.topic == "RDMA" for d in plan.deployment.decisions)
    tcp = _pods(_docs(_multi_node()))  # fixture fabric eth-100g: sockets, as the sizing assumed
    assert all("rdma/rdma_shared_device_a" not in p["containers"][0]["resources"]["limits"] for p in tcp)


def test_rdma_manifests_pass_the_schemas(tmp_path):
    plan = _multi_node(hardware={"interconnect": "roce-400g"})
    path = tmp_path / "rdma.yaml"
    path.write_text(_files(plan)["k8s/serving.yaml"])
    assert _validate_k8s([path]) == []


def test_kustomize_builds_every_kubernetes_example_and_the_objects_pass_the_schemas(tmp_path):
    """`kubectl apply -k out/<plan>`: the kustomization beside k8s/ lists every object file, kustomize builds it
    (real kubectl), and the built objects pass the strict schemas and CRDs."""
    from compiler.pipeline import compile_plan
    from tests.conftest import EXAMPLES
    from tests.tools.realtools import kustomize_build

    built = []
    for example in EXAMPLES:
        files = compile_plan(example).files
        if not any(f.path == "kustomization.yaml" for f in files):
            continue
        root = tmp_path / example.stem
        for f in files:
            (root / f.path).parent.mkdir(parents=True, exist_ok=True)
            (root / f.path).write_text(f.text)
        listed = yaml.safe_load((root / "kustomization.yaml").read_text())["resources"]
        assert all(p.startswith("k8s/") or p == "monitoring/prometheus-rules.yaml" for p in listed)
        assert {f.path for f in files if f.path.startswith("k8s/")} <= set(listed)
        result = kustomize_build(root)
        assert result.returncode == 0, f"{example.stem}: {result.stderr}"
        built.append(tmp_path / f"{example.stem}-built.yaml")
        built[-1].write_text(result.stdout)
    assert len(built) >= 8
    assert _validate_k8s(built) == []


def test_a_multi_node_replica_on_efa_requests_its_devices_and_huge_pages():
    """Every pod of the replica (leader and workers) asks the node's EFA devices and EFA's 5120Mi of 2-MiB huge pages
    (a huge page limit is also its request); on InfiniBand, no huge pages."""
    lws = _one(_docs(_multi_node(hardware={"interconnect": "efa-3200g"})), "LeaderWorkerSet")
    for role in ("leaderTemplate", "workerTemplate"):
        limits = lws["spec"]["leaderWorkerTemplate"][role]["spec"]["containers"][0]["resources"]["limits"]
        assert limits["vpc.amazonaws.com/efa"] == 32 and limits["hugepages-2Mi"] == "5120Mi"
    ib = _one(_docs(_multi_node(hardware={"interconnect": "ib-400g"})), "LeaderWorkerSet")
    assert (
        "hugepages-2Mi"
        not in ib["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]["resources"]["limits"]
    )
