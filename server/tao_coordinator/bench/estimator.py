"""`tao bench estimator`: how well tool returns are forecast on real traces, by the coordinator's forecast and by
the rules and statistics it replaces (what is replayed and scored: `estimator_replay.py`)."""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--traces", type=Path, help="trace folder (default: $TAO_TRACES or ../shared/traces)")
    parser.add_argument("--json", type=Path, help="write the figures as JSON to this file")


def run(args: argparse.Namespace) -> int:
    from ..core.settings import CoreSettings
    from ..progress import Progress
    from ..sim.workloads import traces_dir
    from .estimator_replay import EstimatorFigures, datasets, evaluate

    folder = args.traces or traces_dir()
    settings = CoreSettings()
    rows: list[EstimatorFigures] = []
    for dataset, (path, load) in datasets(folder).items():
        if not path.is_file():
            print(f"tao bench estimator: skipping {dataset}: {path} not found", file=sys.stderr)
            continue
        sessions = load(path)
        progress = Progress(sum(map(len, sessions)), dataset)
        rows += evaluate(dataset, sessions, settings, progress)
        progress.close()
    if not rows:
        print(f"tao bench estimator: no traces under {folder} (set --traces or $TAO_TRACES)", file=sys.stderr)
        return 2
    print(f"{'dataset':<22}{'estimator':<11}{'calls':>7}{'MAE (s)':>9}{'within 0.5 s':>14}{'bias (s)':>10}{'Brier':>8}")
    for r in rows:
        print(
            f"{r.dataset:<22}{r.estimator:<11}{r.calls:>7}{r.mae_s:>9.2f}{r.within_half_second:>14.1%}"
            f"{r.bias_s:>+10.2f}{r.readiness_brier:>8.3f}"
        )
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0
