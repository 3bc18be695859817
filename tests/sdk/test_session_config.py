"""A session's options are checked where they are given: a bad one raises `ConfigurationError` naming it, before
anything is sent; good ones reach `SessionConfig` as given."""

import pytest

import tao_sdk
from tao_sdk.session_config import SessionConfig


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"request_timeout": 2}, r"^request_timeout: not an option of SessionConfig \(its options: coordinator, "),
        ({"connect_timeout_s": 0}, r"^connect_timeout_s: Input should be greater than 0"),
        ({"request_timeout_s": -1.0}, r"^request_timeout_s: Input should be greater than 0"),
        ({"max_wait_s": "long"}, r"^max_wait_s: Input should be a valid number"),
        ({"retry_interval_s": -5}, r"^retry_interval_s: Input should be greater than or equal to 0"),
        ({"fallback_nodes": [3]}, r"^fallback_nodes\.0: Input should be a valid string"),
    ],
)
def test_a_bad_option_is_named(options, message):
    with pytest.raises(tao_sdk.ConfigurationError, match=message):
        tao_sdk.session("http://127.0.0.1:8700", "token", **options)


def test_good_options_are_kept_and_the_rest_default():
    s = tao_sdk.session(
        "http://127.0.0.1:8700,http://127.0.0.1:8701", "token", fallback_nodes=["http://127.0.0.1:8000"], max_wait_s=0
    )
    assert s.config.coordinators == ("http://127.0.0.1:8700", "http://127.0.0.1:8701")
    assert (s.config.fallback_nodes, s.config.max_wait_s) == (("http://127.0.0.1:8000",), 0.0)
    assert (s.config.connect_timeout_s, s.config.request_timeout_s, s.config.retry_interval_s) == (0.5, 2.0, 5.0)


def test_the_configuration_is_frozen_and_copied_to_change():
    config = SessionConfig(coordinator="http://127.0.0.1:8700")
    with pytest.raises(ValueError, match="frozen"):
        config.max_wait_s = 1.0
    assert config.model_copy(update={"fallback_nodes": ("http://n",)}).fallback_nodes == ("http://n",)


def test_environment_fills_what_is_not_given(monkeypatch):
    monkeypatch.setenv("TAO_COORDINATOR", "http://127.0.0.1:8700")
    monkeypatch.setenv("TAO_TOKEN", "from-env")
    monkeypatch.setenv("TAO_NODES", "http://127.0.0.1:8000, http://127.0.0.1:8001")
    s = tao_sdk.session()
    assert (s.config.coordinators, s.config.token) == (("http://127.0.0.1:8700",), "from-env")
    assert s.config.fallback_nodes == ("http://127.0.0.1:8000", "http://127.0.0.1:8001")
    assert tao_sdk.session("http://127.0.0.1:9", "given", fallback_nodes=[]).config.token == "given"
