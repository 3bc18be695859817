"""Signals: the components of a session's value, one module each, all behind `Signal` (see `base.py`)."""

from .base import Signal, SignalContext
from .cache_credit import CacheCredit
from .footprint import Footprint, HeldFootprint, footprint_tokens
from .readiness import Readiness
from .stability import Stability
from .tier import TierCredit
from .token_time import TokenTime

__all__ = [
    "CacheCredit",
    "Footprint",
    "HeldFootprint",
    "Readiness",
    "Signal",
    "SignalContext",
    "Stability",
    "TierCredit",
    "TokenTime",
    "footprint_tokens",
]
