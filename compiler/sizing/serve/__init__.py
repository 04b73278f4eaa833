"""Serving sizing: replica memory, latency and the serving searches (LLM and vision)."""
