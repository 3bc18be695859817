"""Every policy is reachable by name, runs through `tao sim`, and gives the same run for the same seed."""

import json
import subprocess
import sys

import pytest

from tao_coordinator.core.policies import (
    ABLATIONS,
    BASELINES,
    POLICIES,
    VARIANTS,
    BadOptions,
    UnknownPolicy,
    check_name,
    make_policy,
    parse_name,
)
from tao_sdk.cli import main as tao

SMALL = [
    "--trace",
    "synthetic:swe-agent",
    "--sessions",
    "6",
    "--nodes",
    "2",
    "--node-profile",
    "h100-tp2",
    "--no-plots",
]


def test_the_registry_holds_every_baseline_and_ablation():
    assert set(BASELINES) | set(ABLATIONS) | set(VARIANTS) | {"tao"} == set(POLICIES)
    for name in POLICIES:
        assert make_policy(name).name == name


def test_options_in_brackets_fill_the_policys_options_model():
    assert parse_name("dynamo[temperature=0.5;overlap_score_credit=1]") == (
        "dynamo",
        {"temperature": 0.5, "overlap_score_credit": 1},
    )
    policy = make_policy("thunderagent[decay=resume;interval_s=2]")
    assert (policy.name, policy.decay, policy.plan_interval_s) == (
        "thunderagent[decay=resume;interval_s=2]",
        "resume",
        2,
    )
    for bad in ("dynamo[temperature]", "dynamo[nope=1]", "tao[x=1]", "dynamo[temperature=1", "no-such-policy"):
        with pytest.raises(UnknownPolicy):
            make_policy(bad)
        with pytest.raises(UnknownPolicy):
            check_name(bad)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("dynamo[temperatre=0.5]", "unknown option 'temperatre'.*its options: disk_cache_hit_weight, .*temperature"),
        ("dynamo[temperature=hot]", "temperature='hot': Input should be a valid number"),
        ("cost-model[half_life_s=0]", "half_life_s=0: Input should be greater than 0"),
        ("thunderagent[decay=sometimes]", "decay='sometimes'"),
        ("round-robin[turn=1]", "unknown option 'turn' \\(its options: none\\)"),
        ("tao[place=nowhere]", "place='nowhere'.*its options: horizon, place"),
    ],
)
def test_a_bad_option_is_named_with_the_known_ones(name, message):
    with pytest.raises(BadOptions, match=message):
        check_name(name)
    with pytest.raises(BadOptions, match=message):
        make_policy(name)


def test_options_take_the_values_they_took_before():
    dynamo = make_policy("dynamo[temperature=1;overlap_score_credit=0.5]")
    assert (dynamo.temperature, dynamo.credit) == (1.0, 0.5)
    sglang = make_policy("sglang-cache-aware[balance_abs_threshold=32;max_tree_tokens=65536]")
    assert (sglang.balance_abs_threshold, sglang.max_tree_tokens) == (32, 65536)
    assert make_policy("continuum[text_harnesses=mini-swe-agent,swe-agent]").text_harnesses == {
        "mini-swe-agent",
        "swe-agent",
    }
    assert make_policy("tao[horizon=adaptive]").readiness_horizon == "adaptive"


def test_a_third_party_factory_must_make_a_policy():
    assert make_policy("tao_coordinator.baselines.round_robin:RoundRobinPolicy").name == "round-robin"
    with pytest.raises(UnknownPolicy, match="not a Policy"):
        make_policy("collections:OrderedDict")
    with pytest.raises(UnknownPolicy):
        check_name("tao_coordinator.baselines.round_robin:NoSuchPolicy")


_LOADED = """
import sys
from tao_coordinator.config import PolicyConfig
from tao_coordinator.core.policies import POLICIES, check_name
for name in POLICIES:
    PolicyConfig(name=name)
PolicyConfig(name="dynamo[temperature=0.5]")
PolicyConfig(name="tao[place=room]")
print(" ".join(sorted(m for m in sys.modules if m.startswith("tao_coordinator"))))
"""


def test_validating_a_config_imports_no_baseline_and_builds_no_policy():
    loaded = subprocess.run([sys.executable, "-c", _LOADED], capture_output=True, text=True, check=True).stdout.split()
    baselines = {m for m in loaded if m.startswith("tao_coordinator.baselines")}
    assert baselines == {"tao_coordinator.baselines", "tao_coordinator.baselines.options"}
    # no policy module is loaded, so none was built
    assert not {"tao_coordinator.core.policies.tao", "tao_coordinator.core.policies.tao_spread"} & set(loaded)
    assert "tao_coordinator.core.policies.registry" in loaded


@pytest.mark.parametrize("policy", [*BASELINES, *VARIANTS, "dynamo[temperature=0.5]"])
def test_each_baseline_runs_through_tao_sim_and_is_deterministic_for_a_seed(tmp_path, policy, capsys):
    runs = []
    for k in range(2):
        out = tmp_path / f"{k}.json"
        assert tao(["sim", *SMALL, "--policy", policy, "--seed", "3", "--no-timing", "--json", str(out)]) == 0
        runs.append(out.read_text())
    assert runs[0] == runs[1]
    metrics = json.loads(runs[0])["runs"][0]["metrics"]
    assert metrics["requests"] > 0 and metrics["rejected_requests"] == 0
    capsys.readouterr()
