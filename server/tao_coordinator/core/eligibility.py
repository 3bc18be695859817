"""Which nodes may serve which calls: a node serves the models it lists, a session's place is on a node serving its
main model, and a call for another model (a harness's side call) goes elsewhere without moving that place.

A node's `models` is None while unknown (never learned, or a fleet that does not say): such a node is eligible for
every model, so a one-model fleet and the simulator decide exactly as before eligibility existed. A session's main
model (`session_model`) is the first model its calls named (`AgentSession.model`), else its registration's
`AgentProfile.model` when a node of the fleet serves it, else none. A registration may name its model by a label no
node lists (a harness's own name for it): that label constrains nothing, and the first call that names a served
model sets the main one. An empty model is served everywhere. Only a model a call itself names can be refused
(`ModelNotServed`, when no healthy node serves it): that is the name the node will be asked for.

Side calls (`side_node`): a call naming a model other than its session's main model (Claude Code's small fast
model) is an overlapping call of the session on a node serving that model — never the session's own node when
another one serves it, so the call's end is told apart from the session's own call by its node — chosen as the
eligible healthy node with the fewest requests running or queued (its side calls in flight counted), then the most
plannable room left, then by name. It holds no place and moves none; its end changes nothing but the side calls in
flight, which the session itself lists (`AgentSession.side_calls`, stored with it: a replica that takes over tells a
side call's end from that of the session's own call) and the core indexes (`core/coordinator.py`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from .model import AgentSession, Node, NodeId


def serves(node: Node, model: str) -> bool:
    """Whether `node` may take a call for `model` (an unknown list or an unnamed model: yes)."""
    return not model or node.models is None or model in node.models


def eligible(nodes: Mapping[NodeId, Node], model: str) -> dict[NodeId, Node]:
    """The nodes of `nodes` serving `model`, in their order."""
    return {node_id: node for node_id, node in nodes.items() if serves(node, model)}


def session_model(session: AgentSession, fleet: Iterable[Node]) -> str:
    """The model the session's place must serve (module docstring); `fleet`: every known node, of any health."""
    if session.model:
        return session.model
    label = session.context.model
    return label if label and any(serves(node, label) for node in fleet) else ""


def is_side_call(session: AgentSession, model: str | None, fleet: Iterable[Node]) -> bool:
    """A call for a model other than the session's main one (a session with no main model yet has no side calls)."""
    if not model:
        return False
    main = session_model(session, fleet)
    return bool(main) and model != main


def side_node(
    session: AgentSession, nodes: Mapping[NodeId, Node], room: Mapping[NodeId, int], in_flight: Mapping[NodeId, int]
) -> NodeId | None:
    """Where a side call of `session` goes among `nodes` (healthy, serving its model; module docstring): not the
    session's own node unless it is the only one; None when `nodes` is empty. `in_flight`: side calls per node."""
    others = [node_id for node_id in nodes if node_id != session.node]

    def busy(node_id: NodeId) -> tuple[int, int, NodeId]:
        load = nodes[node_id].load
        return (load.running + load.waiting + in_flight.get(node_id, 0), -room.get(node_id, 0), node_id)

    return min(others or list(nodes), key=busy, default=None)
