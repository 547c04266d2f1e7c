from __future__ import annotations

import sys
from pathlib import Path
from typing import Iterator

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from brokerproc import Broker  # noqa: E402


@pytest.fixture(scope="session")
def broker() -> Iterator[Broker]:
    """One in-memory broker shared by the tests; each test uses queues of its own."""
    b = Broker()
    b.start()
    yield b
    b.stop()


@pytest.fixture
def addr(broker: Broker) -> str:
    return broker.addr


@pytest.fixture
def queue(request: pytest.FixtureRequest) -> str:
    return "py." + request.node.name.replace("[", ".").replace("]", "")
