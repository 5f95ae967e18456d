"""Shared pytest setup: hypothesis profiles, markers and the run header."""
import os

import torch
from hypothesis import HealthCheck, settings

from devices import HAS_CUDA

# "ci": small and quick for CI's 2 cores; "device": more examples for a GPU machine.
# CI draws the same examples every run (a red CI is then reproducible); the device profile and
# `pytest --hypothesis-seed=N` explore new ones.
settings.register_profile("ci", max_examples=25, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("device", max_examples=200, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: takes tens of seconds even on a GPU")


def pytest_report_header(config):
    # Which chiplet_fa is under test matters: a source checkout can shadow the installed one.
    import chiplet_fa

    device = torch.cuda.get_device_name() if HAS_CUDA else "cpu only"
    return (f"chiplet_fa from {os.path.dirname(chiplet_fa.__file__)}; torch {torch.__version__}; "
            f"device: {device}; hypothesis profile: {settings.get_current_profile_name()}")
