"""Workflow affinity: credit a session earns where its parent's and siblings' shared prefix is cached."""

import math

from tao_coordinator.core.coordinator import Coordinator
from tao_coordinator.core.events import Acquire, LlmEnd, NodeUpdate, Register
from tao_coordinator.core.model import (
    AgentProfile,
    AgentSession,
    CacheEvidence,
    EvidenceSource,
    Node,
    NodeLoad,
    Phase,
    shared_prefix_blocks,
)
from tao_coordinator.core.policies import make_policy
from tao_coordinator.core.policies.admission import FastAdmit
from tao_coordinator.core.settings import CoreSettings
from tao_coordinator.core.signals import CacheCredit, SignalContext
from tao_coordinator.core.signals.workflow import WorkflowIndex

SETTINGS = CoreSettings(credit_half_life_s=None)  # no decay: the figures below are exact
NODES = {"a": Node("a", 1_000_000), "b": Node("b", 1_000_000)}
SYSTEM = ((1_000, 600),)
"""600 blocks (9,600 tokens) of system prompt and tool catalog the parent's sub-agents all start from."""


def agent(session_id, runs, parent="", evidence=(), **fields):
    context = AgentProfile(workflow_id="", parent_session_id=parent)
    return AgentSession(session_id, context, 0.0, 1e9, prompt_block_runs=runs, evidence=tuple(evidence), **fields)


def credit(session, sessions, workflow=True):
    ctx = SignalContext(0.0, SETTINGS, NODES, WorkflowIndex.of(sessions))
    return CacheCredit(workflow=workflow).on_nodes(session, ctx)


def test_a_sub_agent_without_evidence_gets_credit_for_the_prefix_it_shares_with_its_parent_on_the_parents_node():
    parent = agent("p", (*SYSTEM, (5_000, 3_000)), evidence=[CacheEvidence("a", 60_000, 0.0, EvidenceSource.USAGE)])
    child = agent("p/c", (*SYSTEM, (9_000, 100)), parent="p")
    assert credit(child, [parent, child]) == {"a": 9_600 // SETTINGS.credit_unit_tokens}
    assert credit(child, [parent, child], workflow=False) == {}  # tao-no-workflow


def test_no_shared_blocks_no_credit_and_never_more_than_the_relative_holds():
    parent = agent("p", ((1, 3_000),), evidence=[CacheEvidence("a", 60_000, 0.0, EvidenceSource.USAGE)])
    stranger = agent("p/c", ((9_000, 700),), parent="p")  # AgentX sub-agents: no block in common with the parent
    assert credit(stranger, [parent, stranger]) == {}
    sibling = agent("p/s", (*SYSTEM, (7_000, 50)), parent="p", evidence=[CacheEvidence("b", 2_048, 0.0, 1)])
    child = agent("p/c", (*SYSTEM, (9_000, 100)), parent="p")
    assert credit(child, [parent, sibling, child]) == {"b": 2}  # b holds 2,048 tokens of the sibling: 2 units
    unrelated = agent("q", (*SYSTEM,), evidence=[CacheEvidence("a", 60_000, 0.0, EvidenceSource.USAGE)])
    assert credit(child, [unrelated, child]) == {}  # another workflow's cache is none of its business


def test_a_sibling_inside_a_call_counts_as_holding_its_prompt_and_own_credit_is_never_lowered():
    running = agent("p/s", (*SYSTEM, (7_000, 50)), parent="p", phase=Phase.IN_LLM, node="b", llm_calls=1)
    child = agent("p/c", (*SYSTEM, (9_000, 100)), parent="p", evidence=[CacheEvidence("a", 20_480, 0.0, 1)])
    parent = agent("p", ())
    assert credit(child, [parent, running, child]) == {"a": 20, "b": 9}


def test_a_workflow_id_groups_sessions_and_their_values_are_evaluated_at_every_plan():
    shared = AgentProfile(workflow_id="w", shared_prefix_tokens=4_096)
    first = AgentSession("x", shared, 0.0, 1e9, evidence=(CacheEvidence("b", 50_000, 0.0, EvidenceSource.USAGE),))
    second = AgentSession("y", shared, 0.0, 1e9)
    ctx = SignalContext(0.0, SETTINGS, NODES, WorkflowIndex.of([first, second]))
    signal = CacheCredit()
    assert signal.on_nodes(second, ctx) == {"b": 4}  # the declared shared head, without block identities
    assert signal.changes_at(second, ctx) == 0.0  # depends on other sessions: never kept across plans
    alone = AgentSession("z", AgentProfile(), 0.0, 1e9)
    assert signal.changes_at(alone, SignalContext(0.0, SETTINGS, NODES, WorkflowIndex.of([alone]))) == math.inf


def test_fast_admission_puts_a_sub_agent_where_its_sibling_runs():
    sibling = agent("p/s", (*SYSTEM, (7_000, 50)), parent="p", phase=Phase.IN_LLM, node="b", llm_calls=1)
    child = agent("p/c", (*SYSTEM, (9_000, 100)), parent="p", expected_input_tokens=11_000)
    nodes = {"a": Node("a", 1_000_000), "b": Node("b", 1_000_000, load=NodeLoad(running=5))}
    room = {"a": 10_000, "b": 10_000}
    index = WorkflowIndex.of([sibling])  # the latest plan saw the sibling, not the child: it joins its parent's
    assert FastAdmit().admit(child, nodes, room, SETTINGS, 0.0, index) == "b"
    assert FastAdmit().admit(child, nodes, room, SETTINGS, 0.0) == "a"  # without the index: least loaded


def test_the_coordinator_plans_a_new_sub_agent_onto_its_parents_node():
    """At registration a sub-agent has sent no blocks yet: its declared shared head is what it shares."""

    def run(policy):
        c = Coordinator(make_policy(policy), SETTINGS.model_copy(update={"lease_ttl_s": 1e6}))
        for node in ("a", "b"):
            c.on_event(NodeUpdate(node, 200_000), 0.0)
        c.on_event(Register("p", AgentProfile(shared_prefix_tokens=9_600), expected_input_tokens=40_000), 0.0)
        c.on_event(Acquire("p"), 0.0)
        node = c.session("p").node
        c.on_event(LlmEnd("p", node, 40_000, 0, 100), 1.0)
        context = AgentProfile(parent_session_id="p", shared_prefix_tokens=9_600)
        c.on_event(Register("p/c", context, expected_input_tokens=10_000), 2.0)
        return node, c.session("p/c").node

    parent_node, child_node = run("tao")
    assert child_node == parent_node
    assert run("tao-no-workflow")[1] != parent_node


def test_common_prefix_counts_blocks_however_runs_are_cut():
    assert shared_prefix_blocks(((1, 3), (10, 2)), ((1, 2), (3, 1), (10, 1), (12, 1))) == 4
