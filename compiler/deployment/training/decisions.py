"""The training deployment's decisions and warnings, each with its reason, as the report shows them."""

from __future__ import annotations

from ...plan.deployment import Files
from ...plan.deployment_fields import DeploymentDecision
from ...plan.deployment_training import KubernetesTraining, Launcher, Slurm
from ...plan.runs import runs_dir
from ...plan.spec import PlanSpec
from .. import nodes
from .node_share import DEFAULT_CPUS_PER_GPU, GIB, HOST_MEMORY_PER_GPU_BYTES
from .slurm import (
    CHECKPOINT_WRITE_SAFETY,
    MAX_JOB_SECONDS,
    TIME_MARGIN_FRACTION,
    covered,
    job_paths,
    mount_targets,
    pyxis_mountable,
    slurm_time,
)


def warnings(launch: Launcher, job: Slurm | None, spec: PlanSpec) -> list[str]:
    out = []
    if (
        launch.precision == "fp8" and launch.framework != "megatron"
    ):  # only Megatron's arguments turn fp8 on (--fp8-format)
        out.append(
            f"precision fp8 is sized with fp8 GEMMs, but the {launch.framework} files carry bf16 (DeepSpeed, "
            "Accelerate and FSDP have no fp8 switch of their own): the script must convert its model "
            "(Transformer Engine's fp8_autocast, or torchao's convert_to_float8_training as torchtitan does), "
            "or the steps run at bf16 speed"
        )
    if job and job.container_image:
        targets = mount_targets(job.container_mounts)
        for field, path in job_paths(launch):
            if not covered(path, targets):
                out.append(
                    f"{field} {path!r} has ',' or ':' and cannot be a pyxis mount: the container does not see it; "
                    "mount its parent with cluster.slurm.container_mounts"
                )
    return out


KIND_CONTRACT = {
    "torchrun": "torchrun runs the script; it reads the plan from the MLINFRA_* environment (framework file in MLINFRA_DS_CONFIG / MLINFRA_ACCELERATE_CONFIG)",
    "deepspeed": "torchrun runs the script with --deepspeed_config deepspeed/ds_config.json (deepspeed.add_config_arguments)",
    "hf-trainer": "torchrun runs the Hugging Face Trainer/TRL script with TrainingArguments flags for checkpoints, batch, "
    "clipping, precision, steps and recompute (its DeepSpeed integration refuses a ds_config.json that "
    "disagrees with them), and --deepspeed deepspeed/ds_config.json (TrainingArguments.deepspeed)",
    "accelerate": "accelerate launch --config_file fsdp/accelerate_config.yaml runs the script (accelerate sets the FSDP environment the Accelerator reads)",
    "megatron": "torchrun runs pretrain_gpt.py with the words of megatron/args.sh, then the plan's own arguments",
}


def launch_line(launch: Launcher) -> str:
    if launch.program == "accelerate":
        head = f"accelerate launch --num_machines={launch.nodes} --num_processes={launch.world_size} --max_restarts={launch.max_restarts}"
    else:
        head = f"torchrun --nnodes={launch.nnodes} --nproc-per-node={launch.nproc_per_node} --max-restarts={launch.max_restarts}"
    return f"{head} {launch.script}"


def launcher_reason(launch: Launcher) -> str:
    return launch.restart_reason


def decisions(
    launch: Launcher, job: Slurm | None, k8s: KubernetesTraining | None, kind_given: bool = False
) -> list[DeploymentDecision]:
    out = [
        DeploymentDecision(topic="launcher", choice=launch_line(launch), reason=launcher_reason(launch)),
        contract_decision(launch, job is not None, kind_given),
        checkpoint_signal_decision(launch),
        cpus_decision(launch),
        checkpoint_interval_decision(launch),
    ]
    out += input_decisions(launch)
    if job:
        out += slurm_decisions(job)
    if k8s:
        out.append(
            DeploymentDecision(
                topic="Kubernetes job",
                choice=f"{k8s.job_api}, image {k8s.image}, {k8s.max_restarts} restarts",
                reason=f"image: {k8s.image_reason}; restarts: Llama 3 interruption rate (on-demand) or spot reclaims (spot)",
            )
        )
        out += k8s_pod_decisions(k8s, launch)
    return out


def contract_decision(launch: Launcher, on_slurm: bool, kind_given: bool) -> DeploymentDecision:
    """The launch kind: how the script is started and which generated files it reads."""
    return DeploymentDecision(
        topic="launch contract",
        choice=f"{launch.kind}: {KIND_CONTRACT[launch.kind]}; the job reads "
        + ", ".join([Files().launcher, *launch.reads])
        + (
            " (submit: cd out/<plan> && sbatch slurm/train.sbatch, "
            "which runs bash launch/torchrun.sh on every node through srun)"
            if on_slurm
            else ""
        ),
        reason="train.entrypoint.kind" if kind_given else f"train.entrypoint.kind auto: {launch.kind_reason}",
    )


def checkpoint_signal_decision(launch: Launcher) -> DeploymentDecision:
    """The signal the launcher forwards before the time limit, and how the script checkpoints on it."""
    return DeploymentDecision(
        topic="checkpoint signal",
        choice=f"the launcher forwards SIGUSR1 from Slurm to the workers as SIG{launch.checkpoint_signal} "
        f"(MLINFRA_CHECKPOINT_SIGNAL={launch.checkpoint_signal}); SIGTERM goes to the agent, which stops the workers",
        reason=(
            "Megatron-LM --exit-signal-handler saves and exits on SIGTERM (its --exit-signal default)"
            if launch.checkpoint_signal == "TERM"
            else "torchrun starts workers in their own session, so a signal to the job step reaches them only if "
            "the launcher forwards it; the script checkpoints on it"
            + (
                f" through {launch.checkpoint_helper} (the launcher puts its folder on PYTHONPATH; every "
                "rank agrees on the step to stop at with one all-reduce of the flag per step)"
                if launch.checkpoint_helper
                else ""
            )
            + f": {launch.checkpoint_usage}"
        ),
    )


def cpus_decision(launch: Launcher) -> DeploymentDecision:
    """CPUs per node and OpenMP threads: the plan's, or the default per GPU."""
    return DeploymentDecision(
        topic="CPUs",
        choice=f"{launch.cpus_per_node} per node, OMP_NUM_THREADS={launch.omp_threads}",
        reason="cluster.slurm.cpus_per_node"
        if launch.cpus_per_node != DEFAULT_CPUS_PER_GPU * launch.nproc_per_node
        else f"{DEFAULT_CPUS_PER_GPU} per GPU, the smallest common 8-GPU server (AWS p4d.24xlarge)",
    )


def checkpoint_interval_decision(launch: Launcher) -> DeploymentDecision:
    """The checkpoint interval, retention and folder, and where each framework reads them."""
    ck = launch.checkpoint
    return DeploymentDecision(
        topic="checkpoint interval",
        choice=f"every {ck.interval_seconds:.0f} s = {ck.interval_steps} steps, keep {ck.keep}, in {ck.dir}",
        reason={
            "plan": "train.checkpoint.every",
            "young-daly": "Young-Daly interval from the sizing",
            "floor": "train.checkpoint.min_interval, above the Young-Daly interval",
        }[ck.source]
        + "; exported as MLINFRA_CHECKPOINT_INTERVAL_SECONDS/_STEPS and MLINFRA_CHECKPOINT_KEEP (DeepSpeed and "
        "accelerate configs have no interval key), Megatron --save-interval, Hugging Face --save_steps/--save_total_limit/--output_dir",
    )


def input_decisions(launch: Launcher) -> list[DeploymentDecision]:
    """What the job starts from: its data, model weights or id, and LoRA adapters (each when the plan gives it)."""
    out = []
    if launch.data:
        out.append(
            DeploymentDecision(
                topic="data",
                choice=launch.data,
                reason="train.data, exported as MLINFRA_DATA"
                + (
                    " and mounted at the same path in containers"
                    + (
                        f" by its folder {launch.data_mount} (a Megatron-LM data prefix: PREFIX.bin and PREFIX.idx)"
                        if launch.data_mount != launch.data
                        else ""
                    )
                    if launch.data_mount and pyxis_mountable(launch.data_mount)
                    else ""
                ),
            )
        )
    if launch.model_weights or launch.model_id:
        out.append(
            DeploymentDecision(
                topic="model",
                choice=", ".join(x for x in (launch.model_weights, launch.model_id) if x),
                reason="model.weights / model.hf_id, exported as MLINFRA_WEIGHTS / MLINFRA_MODEL_ID",
            )
        )
    if launch.lora:
        out.append(
            DeploymentDecision(
                topic="adapters",
                choice=f"{launch.lora.method} rank {launch.lora.rank}, alpha {launch.lora.alpha:g}, "
                f"on {', '.join(launch.lora.targets)}",
                reason="train.lora, exported as MLINFRA_LORA_*",
            )
        )
    if launch.lora and launch.lora.quant_storage:
        out.append(
            DeploymentDecision(
                topic="QLoRA under FSDP",
                choice=f"NF4 packed in {launch.lora.quant_storage} (MLINFRA_LORA_QUANT_STORAGE), fsdp_use_orig_params "
                "false",
                reason=launch.lora.quant_storage_reason,
            )
        )
    return out


def slurm_decisions(job: Slurm) -> list[DeploymentDecision]:
    """The Slurm job's time limit and chain, its share of a node, its folder and its warning signal."""
    out = [
        DeploymentDecision(
            topic="Slurm time limit",
            choice=f"{job.time} per job"
            + (f", a chain of {job.links} jobs of {job.steps_per_link} steps" if job.links > 1 else ""),
            reason=f"steps × step time (+ checkpoint writes) + {job.time_margin_fraction:.0%} margin (the step-time range's P90, "
            f"at least {TIME_MARGIN_FRACTION:.0%}) + {job.launch_overhead_seconds:.0f} s launch "
            f"+ restore + warning lead; jobs longer than {slurm_time(job.max_job_seconds)} "
            + (
                "(cluster.slurm.max_time)"
                if job.max_job_seconds != MAX_JOB_SECONDS
                else "(default; set cluster.slurm.max_time to the site's limit)"
            )
            + " chain as a job array",
        )
    ]
    if not job.exclusive:
        out.append(
            DeploymentDecision(
                topic="Slurm share",
                choice=f"--gpus-per-node={job.gpus_per_node} --cpus-per-gpu={job.cpus_per_gpu} "
                f"--mem-per-gpu={job.memory_per_gpu}, not exclusive",
                reason="the job uses fewer GPUs than its node has, so other jobs share the node; " + job.share_reason,
            )
        )
    out.append(
        DeploymentDecision(
            topic="Slurm job folder",
            choice=f"out/runs/{job.job_name}/ (--chdir={runs_dir(job.job_name)}): the job's working directory and logs",
            reason="beside the plan's folder, which every compile replaces whole; a compile makes this one and never "
            "replaces or empties it, so a running job keeps its directory and files",
        )
    )
    out.append(
        DeploymentDecision(
            topic="Slurm signal",
            choice=f"SIGUSR1 {job.signal_lead_seconds} s before the limit",
            reason=f"one step + {CHECKPOINT_WRITE_SAFETY:g} × the checkpoint write time",
        )
    )
    return out


def k8s_pod_decisions(k8s: KubernetesTraining, launch: Launcher) -> list[DeploymentDecision]:
    out = [
        DeploymentDecision(
            topic="trainer pod resources",
            choice=f"{k8s.cpu_millicores / 1000:g} CPU requested (no limit), {k8s.memory_bytes / GIB:.1f} GiB memory "
            f"request = limit, {launch.nproc_per_node} GPU" + (f"; node {k8s.node.node_type}" if k8s.node else ""),
            reason=f"the pod's GPU share of {k8s.node.reason}"
            if k8s.node
            else f"no catalog node holds {launch.nproc_per_node} GPUs: {DEFAULT_CPUS_PER_GPU} CPU and "
            f"{HOST_MEMORY_PER_GPU_BYTES // GIB} GiB per GPU (AWS p4d.24xlarge's share)",
        )
    ]
    if k8s.fabric_resource:
        out.append(
            DeploymentDecision(
                topic="trainer fabric",
                choice=f"{k8s.fabric_resource}: {k8s.fabric_count} per pod, IPC_LOCK; "
                + (f"hugepages-2Mi: {k8s.hugepages_bytes // nodes.MIB}Mi; " if k8s.hugepages_bytes else "")
                + ", ".join(f"{e.name}={e.value}" for e in launch.fabric_env),
                reason=f"{launch.nodes} nodes on a {k8s.fabric} fabric: {nodes.FABRIC_DEVICE_SOURCE[k8s.fabric]}; "
                "NCCL settings exported by launch/torchrun.sh (a value already set in the pod's environment is kept)",
            )
        )
    return out
