"""`tao install claude-code` and `tao install opencode`: merge without clobbering, idempotent, exact uninstall."""

import json

import pytest

from tao_integrations.claude_code_install import HOOKS, TOOL_MATCHER, is_ours
from tao_integrations.opencode_install import PLUGIN_SOURCE
from tao_sdk import cli

PROXY = "http://127.0.0.1:8787"
USER_SETTINGS = {
    "permissions": {"allow": ["Bash(ls:*)"]},
    "hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "~/audit.sh", "timeout": 2}]}],
        "Notification": [{"hooks": [{"type": "command", "command": "notify-send hi"}]}],
    },
    "env": {"ANTHROPIC_BASE_URL": "https://llm.example.internal", "KEEP": "1"},
}


def tao(*words):
    return cli.main(list(words))


@pytest.fixture
def settings_file(tmp_path):
    path = tmp_path / ".claude" / "settings.local.json"
    path.parent.mkdir()
    path.write_text(json.dumps(USER_SETTINGS, indent=2) + "\n")
    return path


def ours(settings):
    return {
        event: [g.get("matcher") for g in groups if any(is_ours(h) for h in g["hooks"])]
        for event, groups in settings["hooks"].items()
    }


def test_claude_code_install_merges_and_uninstall_restores(settings_file, tmp_path, capsys):
    original = settings_file.read_text()
    assert tao("install", "claude-code", "--project", str(tmp_path), "--proxy", PROXY, "--model", "qwen") == 0
    settings = json.loads(settings_file.read_text())
    assert ours(settings) == {
        **{event: [matcher] for event, (matcher, _) in HOOKS.items()},
        "Notification": [],
    }
    assert settings["hooks"]["PreToolUse"][0] == USER_SETTINGS["hooks"]["PreToolUse"][0]
    assert settings["hooks"]["PreToolUse"][1]["matcher"] == TOOL_MATCHER
    assert settings["hooks"]["PreToolUse"][1]["hooks"][0]["command"].endswith(" hook claude-code")
    assert settings["permissions"] == USER_SETTINGS["permissions"]
    env = settings["env"]
    assert (env["ANTHROPIC_BASE_URL"], env["TAO_PROXY_URL"], env["ANTHROPIC_MODEL"], env["KEEP"]) == (
        PROXY,
        PROXY,
        "qwen",
        "1",
    )
    assert env["ANTHROPIC_SMALL_FAST_MODEL"] == env["CLAUDE_CODE_SUBAGENT_MODEL"] == "qwen"

    installed = settings_file.read_text()
    assert tao("install", "claude-code", "--project", str(tmp_path), "--proxy", PROXY, "--model", "qwen") == 0
    assert settings_file.read_text() == installed  # idempotent
    capsys.readouterr()

    assert tao("install", "claude-code", "--project", str(tmp_path), "--uninstall") == 0
    assert json.loads(settings_file.read_text()) == USER_SETTINGS  # the replaced base URL is back
    assert json.loads(original) == USER_SETTINGS


def test_claude_code_small_model_takes_the_small_fast_model_and_haiku_and_leaves_subagents_be(settings_file, tmp_path):
    place = ("--project", str(tmp_path), "--proxy", PROXY)
    assert tao("install", "claude-code", *place, "--model", "big", "--small-model", "small") == 0
    env = json.loads(settings_file.read_text())["env"]
    assert (env["ANTHROPIC_SMALL_FAST_MODEL"], env["ANTHROPIC_DEFAULT_HAIKU_MODEL"]) == ("small", "small")
    assert (env["ANTHROPIC_MODEL"], env["ANTHROPIC_DEFAULT_SONNET_MODEL"], env["ANTHROPIC_DEFAULT_OPUS_MODEL"]) == (
        "big",
        "big",
        "big",
    )
    assert "CLAUDE_CODE_SUBAGENT_MODEL" not in env  # it would put the Explore subagent (haiku) on the big model
    assert tao("install", "claude-code", *place, "--uninstall") == 0
    assert json.loads(settings_file.read_text()) == USER_SETTINGS


def test_claude_code_small_model_without_a_model_is_refused(tmp_path, capsys):
    assert tao("install", "claude-code", "--project", str(tmp_path), "--small-model", "small") == 2
    assert "--small-model needs --model" in capsys.readouterr().err
    assert not (tmp_path / ".claude").exists()


def test_claude_code_dry_run_prints_the_diff_and_writes_nothing(tmp_path, capsys):
    assert tao("install", "claude-code", "--project", str(tmp_path), "--dry-run") == 0
    out = capsys.readouterr().out
    assert '+    "TAO_PROXY_URL": "http://127.0.0.1:8787",' in out and "hook claude-code" in out
    assert not (tmp_path / ".claude").exists()


def test_claude_code_uninstall_of_a_file_we_created_removes_it(tmp_path):
    assert tao("install", "claude-code", "--project", str(tmp_path)) == 0
    assert tao("install", "claude-code", "--project", str(tmp_path), "--uninstall") == 0
    assert not (tmp_path / ".claude" / "settings.local.json").exists()


def test_claude_code_user_settings_follow_claude_config_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(tmp_path / "cfg"))
    assert tao("install", "claude-code", "--user") == 0
    assert "hooks" in json.loads((tmp_path / "cfg" / "settings.json").read_text())


def test_claude_code_refuses_to_overwrite_a_broken_file(tmp_path, capsys):
    path = tmp_path / ".claude" / "settings.local.json"
    path.parent.mkdir()
    path.write_text("{ not json")
    assert tao("install", "claude-code", "--project", str(tmp_path)) == 1
    assert path.read_text() == "{ not json"
    assert "not valid JSON" in capsys.readouterr().err


def test_opencode_install_places_plugin_and_provider_and_uninstall_removes_them(tmp_path):
    config = tmp_path / ".opencode" / "opencode.json"
    config.parent.mkdir()
    mine = {"$schema": "https://opencode.ai/config.json", "provider": {"mine": {"npm": "x"}}, "theme": "dark"}
    config.write_text(json.dumps(mine))
    assert tao("install", "opencode", "--project", str(tmp_path), "--proxy", PROXY, "--model", "Qwen/Qwen3-32B") == 0
    merged = json.loads(config.read_text())
    assert merged["provider"]["mine"] == {"npm": "x"} and merged["theme"] == "dark"
    provider = merged["provider"]["tao"]
    assert provider["options"]["baseURL"] == PROXY + "/v1"
    assert provider["models"]["Qwen/Qwen3-32B"]["limit"] == {"context": 32768, "output": 4096}
    assert merged["model"] == merged["small_model"] == "tao/Qwen/Qwen3-32B"
    plugin = tmp_path / ".opencode" / "plugin" / "tao.ts"
    assert plugin.read_text() == PLUGIN_SOURCE.read_text()

    assert tao("install", "opencode", "--project", str(tmp_path), "--uninstall") == 0
    assert json.loads(config.read_text()) == mine
    assert not plugin.exists()


def test_opencode_install_needs_a_model_and_leaves_a_foreign_plugin_alone(tmp_path, capsys):
    assert tao("install", "opencode", "--project", str(tmp_path)) == 2
    foreign = tmp_path / ".opencode" / "plugin" / "tao.ts"
    foreign.parent.mkdir(parents=True)
    foreign.write_text("export const Other = async () => ({})\n")
    assert tao("install", "opencode", "--project", str(tmp_path), "--model", "m") == 1
    assert "not TAO's plugin" in capsys.readouterr().err
    assert foreign.read_text() == "export const Other = async () => ({})\n"


def test_opencode_dry_run_writes_nothing(tmp_path, capsys):
    assert tao("install", "opencode", "--project", str(tmp_path), "--model", "m", "--dry-run") == 0
    out = capsys.readouterr().out
    assert '"baseURL": "http://127.0.0.1:8787/v1"' in out and "tao.ts (dry run)" in out
    assert not (tmp_path / ".opencode").exists()
