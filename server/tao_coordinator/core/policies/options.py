"""Policy options as `name[key=value;...]` sets them: the base every options model shares, and TAO's own.

The registry (`core/policies/registry.py`) checks a name's options against its policy's model before building
anything, so a misspelt or mistyped option is an error naming it and the known ones, never a silent default. A
policy's constructor takes its model whole: a default lives in the model and nowhere else. Models forbid unknown
keys and never read a bool or a string as a number; `Number` is a finite int or float.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

Horizon = Literal["adaptive", "fixed"]
"""How the `forecast` readiness rule picks its horizon: following load (`forecast/horizon.py`) or fixed."""
PlaceRule = Literal["load", "room"]
"""Where `FastAdmit` (`admission.py`) puts a session without credit: the least loaded node with room, or most room."""

Number = Annotated[float, Field(strict=True, allow_inf_nan=False)]
NonNegative = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=0)]
Positive = Annotated[float, Field(strict=True, allow_inf_nan=False, gt=0)]


class Options(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TaoOptions(Options):
    horizon: Horizon = "fixed"
    """`adaptive`: the readiness horizon H follows the waits of the pool (`forecast/horizon.py`); measured no better."""
    place: PlaceRule = "load"
    """`room`: fast admission puts a session without credit where there is most room, not least load."""
