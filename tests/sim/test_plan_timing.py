"""Planning charged in virtual time: a plan reaches the coordinator after the wall-clock time its solve took
("measured") or after a fixed delay; a late plan goes stale, and the planner's counters say how many were cut or
dropped."""

import json

import pytest

from tao_coordinator.sim.driver import FleetSimulation
from tao_coordinator.sim.node import profile_by_name
from tao_coordinator.sim.prompt import Prompt
from tao_coordinator.sim.workloads import (
    TOOL_START,
    LoadReport,
    RequestSpec,
    ScriptMeta,
    SessionScript,
    Workload,
    generate,
)
from tao_sdk.cli import main as tao

TP1 = profile_by_name("h100-tp1")
# 12 SWE-agent sessions, 8 at a time on one TP1 node: TAO keeps sessions waiting, so plans matter (~0.5 s a run)
CONTENDED = generate("swe-agent", sessions=12, seed=1)


def _one_request() -> Workload:
    script = SessionScript(
        "s0", (RequestSpec(Prompt(1024, ((0, 64),)), 1, 0.0, "start", TOOL_START),), ScriptMeta("agentx", "m")
    )
    report = LoadReport("test", 1, 1, 1, 0, 0, 1024, None)
    return Workload("test", (script,), report)


def _contended(**planning):
    simulation = FleetSimulation(CONTENDED, "tao", 8, TP1, 1, **planning)
    return simulation, simulation.run()


def test_measured_timing_delays_each_plan_by_the_wall_clock_time_its_solve_took():
    # one session, one request: with the static admission TAO admits it only by a plan, so its TTFT is the prefill
    # (the whole TTFT with plans free) plus what every plan before the admission was charged — here each solve's
    # own time + 0.25 s
    free = FleetSimulation(_one_request(), "tao-static-admit", 1, TP1, 1, plan_timing="fixed")
    free.run()
    measured = FleetSimulation(_one_request(), "tao-static-admit", 1, TP1, 1, plan_timing="measured", plan_delay_s=0.25)
    measured.run()
    solves_s = [ms / 1e3 for ms in measured.recorder.plan_ms]
    charged = measured.recorder.ttfts[0] - free.recorder.ttfts[0]
    assert solves_s and all(s > 0 for s in solves_s)
    assert charged == pytest.approx(sum(solves_s) + 0.25 * len(solves_s), abs=1e-9)
    assert charged >= sum(solves_s)


def test_a_long_plan_delay_on_a_contended_fleet_leaves_plans_stale():
    _, free = _contended(plan_timing="fixed", plan_delay_s=0.0)
    _, charged = _contended(plan_timing="fixed", plan_delay_s=2.0)
    # with plans free, a plan is stale on arrival only when an event of the same instant came first (a registration
    # followed by its session's acquire, an acquire admitted at once that takes room the plan counted on): rare
    assert free.plans_cut + free.plans_dropped <= 0.01 * free.plans
    # two seconds is longer than most SWE-agent tools: sessions move on while a plan is in flight
    assert charged.plans_cut + charged.plans_dropped >= 10
    assert charged.requests == free.requests


@pytest.mark.parametrize(("timing", "delay_s"), [("fixed", 0.0), ("fixed", 2.0), ("measured", 0.0)])
def test_planner_counters_add_up_during_and_after_the_run(timing, delay_s):
    # at every plan start that plan is in flight and every earlier one was applied whole, cut or dropped
    checked = []

    def check(_snapshot):
        stats = simulation.coordinator.plan_stats
        in_flight = simulation.coordinator.plan_in_flight is not None
        checked.append(stats.started == stats.applied + stats.cut + stats.dropped + in_flight)

    simulation = FleetSimulation(
        CONTENDED, "tao", 8, TP1, 1, plan_timing=timing, plan_delay_s=delay_s, on_snapshot=check
    )
    metrics = simulation.run()
    stats = simulation.coordinator.plan_stats
    assert checked and all(checked)
    assert simulation.coordinator.plan_in_flight is None
    assert metrics.plans == stats.started == metrics.plans_applied + metrics.plans_cut + metrics.plans_dropped
    assert (metrics.plans_applied, metrics.plans_cut, metrics.plans_dropped) == (
        stats.applied,
        stats.cut,
        stats.dropped,
    )


def test_a_reproducible_run_refuses_measured_plan_timing_and_bad_values():
    with pytest.raises(ValueError, match="measured"):
        FleetSimulation(_one_request(), "tao", 1, TP1, 1, plan_timing="measured").run(timing=False)
    with pytest.raises(ValueError, match="plan_timing"):
        FleetSimulation(_one_request(), "tao", 1, TP1, 1, plan_timing="wall")
    with pytest.raises(ValueError, match="plan_delay_s"):
        FleetSimulation(_one_request(), "tao", 1, TP1, 1, plan_delay_s=-1.0)


def test_no_timing_charges_the_fixed_delay_and_stays_byte_identical(tmp_path, capsys):
    argv = [
        "sim",
        "--trace",
        "synthetic:swe-agent",
        "--sessions",
        "12",
        "--policy",
        "tao",
        "--concurrency",
        "8",
        "--no-plots",
    ]
    argv += ["--nodes", "1", "--node-profile", "h100-tp1", "--seed", "1", "--no-timing", "--plan-delay-ms", "2000"]
    outputs = []
    for name in ("a.json", "b.json"):
        assert tao([*argv, "--json", str(tmp_path / name)]) == 0
        outputs.append((tmp_path / name).read_bytes())
    assert outputs[0] == outputs[1]
    document = json.loads(outputs[0])
    assert document["planning"] == {"timing": "fixed", "delay_ms": 2000.0}
    (run,) = document["runs"]
    assert run["metrics"]["plans_cut"] + run["metrics"]["plans_dropped"] >= 10
    out = capsys.readouterr().out
    assert "each plan is delivered 2000 ms after it starts" in out and "dropped" in out


def test_tao_sim_charges_measured_planning_by_default(tmp_path, capsys):
    argv = ["sim", "--sessions", "4", "--policy", "tao", "--concurrency", "2", "--nodes", "2", "--no-plots"]
    assert tao([*argv, "--json", str(tmp_path / "r.json")]) == 0
    assert json.loads((tmp_path / "r.json").read_text())["planning"] == {"timing": "measured", "delay_ms": 0.0}
    assert "delivered its solve's wall-clock time + 0 ms after it starts" in capsys.readouterr().out
