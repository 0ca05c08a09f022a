"""Every signal of ``delayqueue.signals`` a test's transitions sent, as (name, sender,
kwargs): connect a ``Recorder`` for the test (``recording()``), then read what it got."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from django.dispatch import Signal

from delayqueue import signals


class Recorder:
    """Every signal of delayqueue.signals, as (name, sender, kwargs)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Any, dict[str, Any]]] = []
        self.receivers = {name: self._receiver(name) for name in signals.ALL}

    def _receiver(self, name: str) -> Any:
        def receive(*, signal: Signal, sender: Any, **kwargs: Any) -> None:
            self.sent.append((name, sender, kwargs))

        return receive

    def of(self, name: str) -> list[dict[str, Any]]:
        return [kwargs for sent, _, kwargs in self.sent if sent == name]

    def senders(self, name: str) -> set[Any]:
        return {sender for sent, sender, _ in self.sent if sent == name}


@contextmanager
def recording() -> Iterator[Recorder]:
    recorder = Recorder()
    for name, receiver in recorder.receivers.items():
        signals.ALL[name].connect(receiver)
    try:
        yield recorder
    finally:
        for name, receiver in recorder.receivers.items():
            signals.ALL[name].disconnect(receiver)
