from tao_coordinator.sim.prompt import Prompt
from tao_coordinator.sim.workloads import GapRule, RequestSpec, ScriptMeta, SessionScript, SubagentLaunch
from tao_coordinator.sim.workloads.rules import GapTally, build_workload


def request(prompt_tokens, output_tokens, kind="tool", gap=1.0):
    return RequestSpec(Prompt(prompt_tokens), output_tokens, 0.0 if kind == "start" else gap, kind, "x")


def script(name, *contexts, child=None):
    requests = tuple(request(p, o, "start" if i == 0 else "tool") for i, (p, o) in enumerate(contexts))
    launches = (SubagentLaunch(0, 0.5, child, True),) if child else ()
    return SessionScript(name, requests, ScriptMeta("test", "m"), launches)


def test_gap_rule_caps_each_kind_and_counts_what_it_cut():
    tally = GapTally(GapRule(user_cap_s=30.0, tool_cap_s=600.0))
    gaps = [tally.apply("user", 95.0), tally.apply("user", 12.0), tally.apply("tool", 27_010.0), tally.apply("tool", 8)]
    assert gaps == [30.0, 12.0, 600.0, 8]
    assert (tally.user_capped, tally.tool_capped) == (1, 1)
    assert tally.apply("start", 5.0) == 0.0


def test_context_cap_drops_whole_scripts_including_those_whose_child_passes_it():
    small = script("small", (100, 10), (150, 20))
    large = script("large", (100, 10), (900, 200))
    parent_of_large_child = script("parent", (100, 10), (120, 10), child=script("parent/child", (1000, 1)))
    built = [(s, GapTally(GapRule())) for s in (small, large, parent_of_large_child)]

    workload = build_workload("w", "test", built, max_context=1000)

    assert [s.id for s in workload.scripts] == ["small"]
    report = workload.report
    assert (report.traces_read, report.traces_kept, report.traces_removed) == (3, 1, 2)
    assert report.requests_removed == 2 + 3
    assert [r.peak_context_tokens for r in report.removed] == [1100, 1001]
    assert "max_context 1000" in report.removed[0].reason
    assert all(r.context_tokens <= 1000 for s in workload.scripts for r in s.all_requests())


def test_without_a_cap_everything_is_kept_and_counted():
    child = script("p/c", (10, 1), (20, 1))
    workload = build_workload("w", "test", [(script("p", (5, 1), (6, 1), child=child), GapTally(GapRule()))], None)
    report = workload.report
    assert (report.requests, report.subagent_requests, report.subagents, report.prompt_tokens) == (4, 2, 1, 41)
