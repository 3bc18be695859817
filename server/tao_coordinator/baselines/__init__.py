"""The research baselines TAO is measured against, each a `Policy` (`core/policies/base.py`) in a module of its own.

Routers: `round_robin.py`, `least_loaded.py`, `sglang.py`, `dynamo.py`, `llm_d.py`, `cost_model.py`; admission
policies: `thunderagent.py`, `continuum.py`. What several of them share: `runs.py` (sets of KV block ids, and block
sequences as runs), `kv_index.py` (indexes fed by KV events), `load.py` (router-side load bookkeeping), `choice.py`
(Dynamo's picker), `step_fit.py` (cost-model's step-time fit), `options.py` (every router's options and defaults).

This package imports nothing on import: the registry (`core/policies/registry.py`) loads a baseline by dotted path
when one is asked for by name, so the coordinator and config validation never load a router they do not run. The
core never imports this package; this package imports the core.
"""
