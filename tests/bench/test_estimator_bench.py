"""The estimator benchmark's evaluation on hand-made calls: learning order, fallbacks, and the unit dependence of
the published bound."""

import pytest

from tao_coordinator.bench.estimator import evaluate, paper_bound
from tao_coordinator.core.model import ToolHints
from tao_coordinator.core.settings import CoreSettings


def test_paper_bound_changes_with_the_unit_and_the_corrected_one_does_not():
    samples = [1.0, 2.0, 4.0]
    assert paper_bound(samples, 0.2, 1000.0) > 10 * paper_bound(samples, 0.2, 1.0)


def test_each_call_is_predicted_from_what_came_before_it():
    calls = [("ls", ToolHints(), 1.0)] * 10
    rows = {row.estimator: row for row in evaluate("hand", calls, CoreSettings())}
    assert rows["median"].calls == 10
    # three default predictions of 5 s (no history yet), then exact
    assert rows["median"].mae_s == pytest.approx(3 * 4.0 / 10)
    assert rows["median"].within_half_second == pytest.approx(0.7)
    assert rows["bernstein"].bias_s > 0  # an upper bound errs on the long side


def test_timeouts_cap_every_estimator():
    calls = [("sleepy", ToolHints(timeout_s=2.0), 10.0)] * 5
    rows = evaluate("hand", calls, CoreSettings())
    assert all(row.mae_s == pytest.approx(8.0) for row in rows)
