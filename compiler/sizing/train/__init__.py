"""Training sizing: the layout search (search.py), per-GPU memory (memory.py), step time (time.py) and the parallel
layouts' pipeline split and communication volumes (parallel.py)."""
