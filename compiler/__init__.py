"""mlinfra-compile: a declarative ML-infrastructure plan compiler."""

__version__ = "0.1.0"
