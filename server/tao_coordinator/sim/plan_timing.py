"""What a plan costs in virtual time (`driver.py`): `measured`, the wall-clock time its solve took, or `fixed`, a
set delay alone (reproducible). Its own module so that `tao sim --help` names the choices without the driver."""

from __future__ import annotations

from typing import Literal, get_args

PlanTiming = Literal["measured", "fixed"]
PLAN_TIMINGS: tuple[PlanTiming, ...] = get_args(PlanTiming)
