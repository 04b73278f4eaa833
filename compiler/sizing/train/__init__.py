"""Training sizing: the layout search (search.py), per-GPU memory (memory.py; the model states in model_states.py),
step time (time.py, with the FLOPs in flops.py, the collectives in communication.py and what every term reads in
step_rates.py), wall time with failures and checkpoints (goodput.py) and the parallel layouts' pipeline split and
communication volumes (parallel.py)."""
