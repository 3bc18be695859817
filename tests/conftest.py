"""Shared test settings: hypothesis profiles (CI runs the same number of examples as a developer)."""

from hypothesis import HealthCheck, settings

settings.register_profile("default", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("default")
