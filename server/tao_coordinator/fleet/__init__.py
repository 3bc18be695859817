"""Observing real vLLM nodes: `/metrics` and `/health` scraping, KV-event subscription over ZMQ, and the models a node
serves (`/v1/models`)."""
