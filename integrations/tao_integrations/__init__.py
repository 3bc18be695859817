"""Harness integrations of TAO: Claude Code hooks, the OpenCode plugin's helpers, mini-swe-agent classes."""
