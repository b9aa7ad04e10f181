"""Fixtures shared by the model tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rootproof.agent.models.openai_compat import OpenAICompatModel


@pytest.fixture
def models() -> Iterator[list[OpenAICompatModel]]:
    """Models made by a test, closed afterwards."""
    made: list[OpenAICompatModel] = []
    yield made
    for m in made:
        m.close()
