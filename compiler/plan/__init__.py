"""The typed artifacts of a compile, and nothing else: `spec` (the plan as written), `resolved` (every number
decided, the targets' only input), `deployment` (the Deployment section's types), `framework_configs` (the DeepSpeed,
Accelerate and FSDP2 files it carries, typed) and `probe` (the probe section's types). These modules import only
pydantic, the catalog's types and each other; the passes, sizing and deployment packages decide the values."""
