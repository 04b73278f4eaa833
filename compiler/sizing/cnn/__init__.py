"""CNN sizing: per-layer tables (layers.py) and the training batch time of a convolutional network (train.py)."""
