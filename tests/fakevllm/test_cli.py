"""`tao fake-vllm` and `tao bench fake-vllm` as a user runs them (subprocesses, loopback only, no timing asserts)."""

import argparse
import json
import re
import signal
import subprocess
import sys
import urllib.request

import pytest

from tao_coordinator.fakevllm.cli import add_arguments, build_config
from tao_sdk.cli import main


@pytest.fixture
def served(tmp_path):
    policy = tmp_path / "policy.json"
    policy.write_text(json.dumps({"filler_tokens": 3}))
    command = [sys.executable, "-m", "tao_sdk.cli", "fake-vllm", "--port", "0", "--profile", "h100-tp4"]
    command += ["--time-scale", "20", "--policy", str(policy), "--served-model-name", "fake-model"]
    command += ["--kv-events-endpoint", "tcp://127.0.0.1:*", "--kv-events-encoding", "array"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = process.stdout.readline()
    yield process, line
    process.send_signal(signal.SIGTERM)
    _, stderr = process.communicate(timeout=10)
    assert process.returncode == 0, stderr


def test_fake_vllm_command_serves_until_terminated(served):
    _, line = served
    url = re.search(r"on (http://127\.0\.0\.1:\d+)", line).group(1)
    assert "profile h100-tp4" in line and "KV events on tcp://127.0.0.1:" in line
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
    request = urllib.request.Request(
        url + "/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request) as response:
        assert json.loads(response.read())["usage"]["completion_tokens"] == 3
    with urllib.request.urlopen(url + "/kv_event_sources") as response:
        assert json.loads(response.read())["0"]["endpoint"].startswith("tcp://127.0.0.1:")  # keyed by DP rank


def test_bad_arguments_are_reported(capsys):
    assert main(["fake-vllm", "--profile", "h200-tp9"]) == 2
    assert "unknown node profile 'h200-tp9'" in capsys.readouterr().err
    assert main(["fake-vllm", "--time-scale", "0"]) == 2


def test_vllm_kv_events_config_json_is_accepted():
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    config_json = '{"enable_kv_cache_events": true, "endpoint": "tcp://127.0.0.1:5557", "topic": "kv@n1"}'
    config = build_config(parser.parse_args(["--kv-events-config", config_json]))
    assert config.kv_events is not None and config.kv_events.connect and config.kv_events.topic == "kv@n1"
    assert build_config(parser.parse_args(["--kv-events-config", '{"endpoint": "tcp://*:1"}'])).kv_events is None


def test_bench_command_serves_200_concurrent_streams_prints_and_writes_json(tmp_path):
    out = tmp_path / "bench.json"
    command = [sys.executable, "-m", "tao_sdk.cli", "bench", "fake-vllm", "--requests", "200", "--concurrency", "200"]
    command += ["--time-scale", "50", "--startup-trials", "1", "--max-tokens", "8", "--json", str(out)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 errors" in done.stdout and "requests/s" in done.stdout and "p99" in done.stdout
    assert done.stdout.rstrip().endswith(f"wrote {out}")
    report = json.loads(out.read_text())
    assert (report["requests"], report["concurrency"], report["errors"]) == (200, 200, 0)
    assert report["requests_per_s"] > 0 and report["latency_p99_s"] >= report["latency_p50_s"] > 0
    assert len(report["startup_s"]) == 1 and report["cached_share"] > 0


def test_bench_command_refuses_values_that_measure_nothing(tmp_path, capsys):
    out = tmp_path / "never.json"
    assert main(["bench", "fake-vllm", "--concurrency", "0", "--json", str(out)]) == 2
    assert "must be positive" in capsys.readouterr().err and not out.exists()
    assert main(["bench", "fake-vllm", "--profile", "h200-tp9", "--json", str(out)]) == 2
    assert "unknown node profile 'h200-tp9'" in capsys.readouterr().err and not out.exists()
