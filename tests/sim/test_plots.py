"""`tao sim`'s charts: written by default beside the JSON and announced, skipped with --no-plots; one concurrency
draws labelled bars (not single dots), several draw lines with ticks at the concurrencies; y axes start at 0."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from tao_coordinator.sim import plots
from tao_sdk.cli import main as tao

SMALL = ["sim", "--sessions", "3", "--nodes", "2", "--policy", "tao,round-robin", "--no-timing"]


def _axes_of_charts(monkeypatch, argv, tmp_path):
    """Runs `tao sim` and keeps the first axes of every chart it draws."""
    kept = []
    close = plt.close

    def keep(figure=None):
        if figure is not None:
            kept.append(figure.axes[0])
        close(figure)

    monkeypatch.setattr(plt, "close", keep)
    assert tao([*argv, "--plots", str(tmp_path / "plots")]) == 0
    return kept


def test_plots_are_written_beside_the_json_by_default_and_announced(tmp_path, capsys):
    out = tmp_path / "run.json"
    assert tao([*SMALL, "--concurrency", "2", "--json", str(out)]) == 0
    directory = tmp_path / "run-plots"
    assert sorted(p.name for p in directory.iterdir()) == ["hit_rate.png", "latency.png", "throughput.png", "ttft.png"]
    printed = capsys.readouterr().out
    assert f"in {directory} (--no-plots skips them)" in printed
    assert "plan ms, p95:" in printed and "overhead:" in printed


def test_no_plots_writes_none(tmp_path, capsys):
    out = tmp_path / "run.json"
    assert tao([*SMALL, "--concurrency", "2", "--json", str(out), "--no-plots"]) == 0
    assert not (tmp_path / "run-plots").exists()
    assert "plots:" not in capsys.readouterr().out


def test_one_concurrency_draws_labelled_bars_from_zero(monkeypatch, tmp_path):
    axes = _axes_of_charts(monkeypatch, [*SMALL, "--concurrency", "2"], tmp_path)
    assert len(axes) == len(plots.CHARTS)
    for axis in axes:
        assert len(axis.patches) == 2 and not axis.lines
        assert [t.get_text() for t in axis.get_xticklabels()] == ["tao", "round-robin"]
        assert axis.get_ylim()[0] == 0 or axis.get_yscale() == "log"


def test_several_concurrencies_draw_lines_with_ticks_at_them(monkeypatch, tmp_path):
    axes = _axes_of_charts(monkeypatch, [*SMALL, "--concurrency", "1,2"], tmp_path)
    for axis in axes:
        assert len(axis.lines) == 2
        assert list(axis.get_xticks()) == [1, 2]
        assert axis.get_ylim()[0] == 0 or axis.get_yscale() == "log"
