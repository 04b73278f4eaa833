"""Serving deployment decisions: engine arguments (vLLM, TGI), images, probes, caches, autoscaling windows.

Moved here from the targets (vllm.py, tgi.py, k8s_serving.py), which now only place these values. One module per
concern: engine_args (vLLM and TGI flags), triton_model (the Triton model repository and its images), engines (one
Engine per serving unit, with its drain), pods (the Kubernetes serving unit: images, probes, caches, resources,
autoscaling) and decisions (the reasons and warnings the report shows).
"""
