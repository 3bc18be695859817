"""Every policy is reachable by name, runs through `tao sim`, and gives the same run for the same seed."""

import json

import pytest

from tao_coordinator.core.policies import (
    ABLATIONS,
    BASELINES,
    POLICIES,
    VARIANTS,
    UnknownPolicy,
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


def test_options_in_brackets_become_keyword_arguments():
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
