"""Harness integrations of TAO: Claude Code hooks (`claude_code`, `claude_code_install`), the OpenCode plugin's
installer (`opencode_install`; the plugin itself is `integrations/opencode/`), and mini-swe-agent classes
(`mini_swe_agent`). See docs/integrations.md."""
