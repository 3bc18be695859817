"""Discrete-event fleet simulator: a vLLM-faithful node model, trace workloads, and a virtual-time driver of the
same scheduling core the live coordinator runs."""
