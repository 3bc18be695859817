"""Observing real vLLM nodes: `/metrics` and `/health` scraping, and KV-event subscription over ZMQ."""
