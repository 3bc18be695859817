"""A node serving several names, as vLLM does: a base model under two names plus a LoRA adapter, listed by
`GET /v1/models` in vLLM 0.33's shape; calls to each served name succeed, any other name is a 404 in vLLM's words
on both the OpenAI and the Anthropic routes. Real servers on loopback, real clients."""

from __future__ import annotations

import argparse
import json
import re
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator

import anthropic
import openai
import pytest
from pydantic import ValidationError

from tao_coordinator.fakevllm import FakeNodeConfig, ThreadedFleet
from tao_coordinator.fakevllm.cli import add_arguments, build_config
from tao_coordinator.fakevllm.fleet import FakeNode
from tao_coordinator.fakevllm.model_cards import LoraModule, parse_lora_module
from tao_sdk.cli import main

BASE = "Qwen/Qwen3-32B"
ALIAS = "qwen-large"
ROOT = "/models/Qwen3-32B"
ADAPTER = LoraModule(name="team-sql", path="/adapters/sql-lora")
SERVED = [BASE, ALIAS, ADAPTER.name]
OTHER = "Qwen/Qwen3-4B"
MESSAGES = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def fleet() -> Iterator[ThreadedFleet]:
    """Node 0 serves two names and an adapter; node 1 serves another model alone: a fleet of two models."""
    several = FakeNodeConfig(
        time_scale=50, served_model_aliases=(ALIAS,), model=ROOT, lora_modules=(ADAPTER,), served_model_name=BASE
    )
    with ThreadedFleet([several, FakeNodeConfig(time_scale=50, served_model_name=OTHER)], kv_events=False) as nodes:
        yield nodes


@pytest.fixture(scope="module")
def multi(fleet: ThreadedFleet) -> FakeNode:
    return fleet.nodes[0]


def _get_json(url: str) -> object:
    with urllib.request.urlopen(url) as response:
        return json.loads(response.read())


def test_models_are_listed_as_vllm_lists_them(multi: FakeNode) -> None:
    body = _get_json(multi.url + "/v1/models")
    assert isinstance(body, dict) and body["object"] == "list" and list(body) == ["object", "data"]
    cards = body["data"]
    assert [card["id"] for card in cards] == SERVED
    created = int(multi.service.started)
    for card in cards:
        assert list(card) == ["id", "object", "created", "owned_by", "root", "parent", "max_model_len", "permission"]
        assert (card["object"], card["owned_by"], card["created"]) == ("model", "vllm", created)
        [permission] = card["permission"]
        assert permission == {
            "id": f"modelperm-{card['id']}",
            "object": "model_permission",
            "created": created,
            "allow_create_engine": False,
            "allow_sampling": True,
            "allow_logprobs": True,
            "allow_search_indices": False,
            "allow_view": True,
            "allow_fine_tuning": False,
            "organization": "*",
            "group": None,
            "is_blocking": False,
        }
    base, alias, lora = cards
    limit = multi.service.max_model_len
    assert (base["root"], base["parent"], base["max_model_len"]) == (ROOT, None, limit)
    assert (alias["root"], alias["parent"], alias["max_model_len"]) == (ROOT, None, limit)
    assert (lora["root"], lora["parent"], lora["max_model_len"]) == (ADAPTER.path, BASE, None)


def test_one_model_is_listed_as_before(fleet: ThreadedFleet) -> None:
    single = fleet.nodes[1]
    [card] = _get_json(single.url + "/v1/models")["data"]
    assert (card["id"], card["root"], card["parent"]) == (OTHER, OTHER, None)
    assert card["max_model_len"] == single.service.max_model_len


def test_every_served_name_answers(
    multi: FakeNode,
    openai_for: Callable[[FakeNode], openai.OpenAI],
    anthropic_for: Callable[[FakeNode], anthropic.Anthropic],
) -> None:
    """A call to an alias is answered with the main name (vLLM's `model_name()`), one to an adapter with its own."""
    oai, claude = openai_for(multi), anthropic_for(multi)
    answered = {BASE: BASE, ALIAS: BASE, ADAPTER.name: ADAPTER.name}
    for asked, answer in answered.items():
        chat = oai.chat.completions.create(model=asked, messages=MESSAGES, max_tokens=3)
        assert chat.model == answer and chat.choices
        completion = oai.completions.create(model=asked, prompt="hello", max_tokens=2)
        assert completion.model == answer
        message = claude.messages.create(model=asked, max_tokens=3, messages=MESSAGES)
        assert message.model == answer
        assert claude.messages.count_tokens(model=asked, messages=MESSAGES).input_tokens > 0


def test_metrics_name_the_first_served_name(multi: FakeNode) -> None:
    with urllib.request.urlopen(multi.url + "/metrics") as response:
        text = response.read().decode()
    assert set(re.findall(r'model_name="([^"]*)"', text)) == {BASE}


def test_a_model_the_node_does_not_serve_is_a_404(
    fleet: ThreadedFleet,
    openai_for: Callable[[FakeNode], openai.OpenAI],
    anthropic_for: Callable[[FakeNode], anthropic.Anthropic],
) -> None:
    multi, single = fleet.nodes
    message = f"The model `{OTHER}` does not exist. Valid aliases: {BASE}, {ALIAS}."
    with pytest.raises(openai.NotFoundError) as caught:
        openai_for(multi).chat.completions.create(model=OTHER, messages=MESSAGES)
    assert caught.value.body == {"message": message, "type": "NotFoundError", "param": "model", "code": 404}
    with pytest.raises(anthropic.NotFoundError) as refused:
        anthropic_for(multi).messages.create(model=OTHER, max_tokens=3, messages=MESSAGES)
    assert refused.value.body == {"type": "error", "error": {"type": "not_found_error", "message": message}}
    with pytest.raises(openai.NotFoundError) as other:  # and the other node does not serve the first's adapter
        openai_for(single).completions.create(model=ADAPTER.name, prompt="hello")
    assert other.value.body["message"] == f"The model `{ADAPTER.name}` does not exist. Valid aliases: {OTHER}."


def test_the_command_line_takes_vllm_flags() -> None:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    lora_json = '{"name": "b", "path": "/adapters/b", "base_model_name": "big"}'
    flags = ["--served-model-name", "big", "large", "--model", "/m", "--lora-modules", "a=/adapters/a", lora_json]
    config = build_config(parser.parse_args([*flags, "--allow-runtime-lora-updating"]))
    assert config.allow_runtime_lora_updating
    assert (config.served_model_name, config.served_model_aliases, config.model) == ("big", ("large",), "/m")
    assert config.lora_modules == (
        LoraModule(name="a", path="/adapters/a"),
        LoraModule(name="b", path="/adapters/b", base_model_name="big"),
    )
    plain = build_config(parser.parse_args([]))
    assert (plain.served_model_name, plain.served_model_aliases, plain.lora_modules) == (BASE, (), ())
    assert not plain.allow_runtime_lora_updating


def test_an_adapter_on_an_unserved_base_hangs_off_the_first_name() -> None:
    served = FakeNodeConfig(lora_modules=(LoraModule(name="a", path="/a", base_model_name="nope"),)).catalog()
    [_, card] = served.model_list(created=0, max_model_len=100)["data"]
    assert card["parent"] == BASE


def test_bad_names_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fake-vllm", "--lora-modules", "no-path"]) == 2
    assert "expected name=path or a JSON object" in capsys.readouterr().err
    assert main(["fake-vllm", "--served-model-name", "m", "m"]) == 2
    assert "served twice: m" in capsys.readouterr().err
    with pytest.raises(ValidationError, match="served twice: x"):
        FakeNodeConfig(served_model_name="x", lora_modules=(LoraModule(name="x", path="/x"),))
    with pytest.raises(ValidationError, match="served twice: y"):
        FakeNodeConfig(served_model_name="x", served_model_aliases=("y", "y"))
    with pytest.raises(ValueError, match="expected name=path"):
        parse_lora_module("no-path")
    with pytest.raises(ValidationError):
        parse_lora_module('{"name": "a"}')


def _post(url: str, body: object) -> tuple[int, str]:
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_adapters_load_and_unload_at_run_time_when_allowed(openai_for: Callable[[FakeNode], openai.OpenAI]) -> None:
    config = FakeNodeConfig(time_scale=50, allow_runtime_lora_updating=True)
    with ThreadedFleet([config, FakeNodeConfig(time_scale=50)], kv_events=False) as fleet:
        node, locked = fleet.nodes
        load, unload = node.url + "/v1/load_lora_adapter", node.url + "/v1/unload_lora_adapter"
        assert _post(load, {"lora_name": "x", "lora_path": "/adapters/x"}) == (
            200,
            "Success: LoRA adapter 'x' added successfully.",
        )
        [_, card] = _get_json(node.url + "/v1/models")["data"]
        assert (card["id"], card["root"], card["parent"], card["max_model_len"]) == ("x", "/adapters/x", BASE, None)
        assert openai_for(node).completions.create(model="x", prompt="hello", max_tokens=2).model == "x"
        status, again = _post(load, {"lora_name": "x", "lora_path": "/adapters/x2"})
        assert (status, json.loads(again)["error"]["type"]) == (400, "InvalidUserInput")
        assert "has already been loaded" in json.loads(again)["error"]["message"]
        assert _post(load, {"lora_name": "x", "lora_path": "/adapters/x2", "load_inplace": True})[0] == 200
        assert _get_json(node.url + "/v1/models")["data"][1]["root"] == "/adapters/x2"
        status, empty = _post(load, {"lora_name": "y", "lora_path": ""})
        assert (status, json.loads(empty)["error"]["message"]) == (
            400,
            "Both 'lora_name' and 'lora_path' must be provided.",
        )
        assert _post(unload, {"lora_name": "x"}) == (200, "Success: LoRA adapter 'x' removed successfully.")
        status, gone = _post(unload, {"lora_name": "x"})
        assert (status, json.loads(gone)["error"]) == (
            404,
            {"message": "The lora adapter 'x' cannot be found.", "type": "NotFoundError", "param": None, "code": 404},
        )
        with pytest.raises(openai.NotFoundError):
            openai_for(node).completions.create(model="x", prompt="hello", max_tokens=2)
        _post(load, {"lora_name": "z", "lora_path": "/adapters/z"})
        _post(node.url + "/fake/restart", {})
        assert [card["id"] for card in _get_json(node.url + "/v1/models")["data"]] == [BASE]  # a new process
        assert _post(locked.url + "/v1/load_lora_adapter", {"lora_name": "x", "lora_path": "/x"})[0] == 404


def test_the_command_serves_every_name_it_is_given() -> None:
    command = [sys.executable, "-m", "tao_sdk.cli", "fake-vllm", "--port", "0", "--time-scale", "50"]
    command += ["--served-model-name", "big", "large", "--lora-modules", "sql=/adapters/sql"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline() if process.stdout else ""
        assert "serving big (also large, sql) on" in line
        url = re.search(r"on (http://127\.0\.0\.1:\d+)", line).group(1)
        assert [card["id"] for card in _get_json(url + "/v1/models")["data"]] == ["big", "large", "sql"]
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=10)
    assert process.returncode == 0, stderr
