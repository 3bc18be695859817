"""The coordinator's configuration: TOML, overrides, and errors that name the field."""

import pytest

from tao_coordinator.config import ConfigError, load_config

TOKEN = "a-token-of-sixteen-chars"


def test_file_and_overrides(tmp_path):
    path = tmp_path / "fleet.toml"
    path.write_text(
        f'[server]\ntoken = "{TOKEN}"\nport = 9000\n'
        '[[nodes]]\nname = "a"\nurl = "http://10.0.0.1:8000/"\ncapacity_tokens = 320000\n'
        '[policy]\nname = "tao-no-dp"\n[core]\ncredit_half_life_s = 5\n'
    )
    config = load_config(path, {"server.port": 9100, "server.host": None}, [{"name": "b", "url": "http://x:1"}])
    assert config.server.port == 9100 and config.server.host == "127.0.0.1"
    assert [(n.name, n.url, n.capacity_tokens) for n in config.nodes] == [
        ("a", "http://10.0.0.1:8000", 320000),
        ("b", "http://x:1", None),
    ]
    assert config.policy.name == "tao-no-dp" and config.core.credit_half_life_s == 5
    assert load_config(path, {"policy.name": "dynamo[temperature=0.5]"}).policy.name == "dynamo[temperature=0.5]"


def test_token_from_the_environment(monkeypatch):
    monkeypatch.setenv("TAO_TOKEN", TOKEN)
    assert load_config(None, {}).server.token == TOKEN


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({}, "set server.token"),
        ({"server.insecure_no_auth": True, "server.host": "0.0.0.0"}, "only allowed on a loopback"),
        ({"server.token": "short"}, "server.token"),
        ({"server.token": TOKEN, "core": {"credit_half_life_s": -1}}, "core.credit_half_life_s"),
        ({"server.token": TOKEN, "core": {"nonsense": 1}}, "core.nonsense"),
        ({"server.token": TOKEN, "nodes": [{"name": "a", "url": "ftp://x"}]}, "nodes.0.url"),
        ({"server.token": TOKEN, "policy.name": "nope"}, "policy.name: .*unknown policy 'nope'"),
        ({"server.token": TOKEN, "policy.name": "dynamo[nonsense=1]"}, "policy.name"),
        (
            {"server.token": TOKEN, "nodes": [{"name": "a", "url": "http://x"}, {"name": "a", "url": "http://y"}]},
            "unique",
        ),
    ],
)
def test_invalid_configurations_name_the_field(monkeypatch, overrides, message):
    monkeypatch.delenv("TAO_TOKEN", raising=False)
    with pytest.raises(ConfigError, match=message):
        load_config(None, overrides)


def test_unreadable_or_invalid_files(tmp_path):
    with pytest.raises(ConfigError, match=r"missing\.toml"):
        load_config(tmp_path / "missing.toml", {})
    bad = tmp_path / "bad.toml"
    bad.write_text("[server\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad, {})
