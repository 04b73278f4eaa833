"""Training deployment decisions: the torchrun launcher, the Slurm job and its chain, the Kubernetes job.

Moved here from the targets (torchrun.py, slurm.py, k8s_training.py), which now only place these values. One module
per concern: launch_kind (which launch contract runs the script), elastic (spot restarts and the node range),
node_share (a job below a node: its CPUs and memory), launcher (the torchrun/accelerate launcher), slurm (the sbatch
job and its chain), kubernetes (the training job's pods) and decisions (the reasons and warnings the report shows).
"""
