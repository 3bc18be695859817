"""`tao demo`: a fake vLLM fleet, a real coordinator and synthetic agents using the SDK, compared across policies."""
