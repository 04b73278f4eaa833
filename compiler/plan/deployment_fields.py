"""The base of every deployment section and the small types the training and serving sections share: a decision with
its reason, an environment variable, and the node share a pod or a Slurm job is sized on."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Section(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class DeploymentDecision(Section):
    topic: str
    choice: str
    reason: str = Field(description="why, with the source of any constant (a documentation page, a default, a policy)")


class EnvVar(Section):
    name: str
    value: str
    comment: str = ""


class NodeShare(Section):
    """The catalog node a pod (or a Slurm job) is sized on, and its share of the node's allocatable CPU and memory
    (compiler/deployment/nodes.py)."""

    node_type: str = Field(description="catalog node type id (p5.48xlarge, dgx-h100, ...)")
    provider: str
    node_vcpus: int
    node_memory_bytes: int
    node_gpus: int
    node_local_nvme_bytes: int
    efa_interfaces: int = Field(description="EFA devices of the node (AWS)")
    gpus: int = Field(description="GPUs of the node the pod or job takes")
    cpu_millicores: int = Field(description="(node vCPU - system reserve - daemonsets) x gpus / node GPUs")
    memory_bytes: int = Field(description="(node memory - system reserve - eviction - daemonsets) x gpus / node GPUs")
    floor_bytes: int = Field(
        description="host memory the pod needs at least (weights through host memory, overhead, shm)"
    )
    fits: bool = Field(description="the share holds the floor")
    priced: bool = Field(description="the node the GPU's price per hour is from (the catalog's first node type)")
    outgrown_priced_node: bool = Field(
        description="the node the price is from cannot hold the pod (fewer GPUs than it needs, or a share below its floor): "
        "a larger node is used, and the plan pays its price where the node has one"
    )
    reason: str = Field(description="the arithmetic")
