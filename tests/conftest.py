"""Shared fixtures: a local generator so tests never depend on global seeding order."""

import pytest
import torch


@pytest.fixture
def gen() -> torch.Generator:
    return torch.Generator().manual_seed(0)
