"""Publishing claimed jobs to the Celery broker.

``publisher_for(app)`` picks how: ``SendTaskPublisher`` works with every broker Celery
supports (it is Celery's own ``send_task``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from celery import Celery
from kombu.exceptions import OperationalError


@dataclass(frozen=True)
class TaskMessage:
    """One Celery task message to publish for one dispatch of a job."""

    name: str  # the task the Celery worker runs (delayqueue.run_task for plain tasks)
    args: list[Any]
    kwargs: dict[str, Any]
    headers: dict[str, str]
    route_name: str  # the task whose routing (queue, exchange) applies


class PublishError(Exception):
    """The broker refused a message: ``published`` messages before it went out."""

    def __init__(self, published: int, cause: BaseException) -> None:
        super().__init__(f"broker refused the message after {published} were published: {cause}")
        self.published = published
        self.cause = cause


class Publisher(Protocol):
    def publish(self, messages: list[TaskMessage]) -> None:
        """Publish in order; raise PublishError saying how many went out."""


class SendTaskPublisher:
    """Celery's ``send_task`` on one pooled producer: any broker."""

    def __init__(self, app: Celery) -> None:
        self.app = app

    def publish(self, messages: list[TaskMessage]) -> None:
        with self.app.producer_or_acquire() as producer:
            for index, message in enumerate(messages):
                try:
                    self.app.send_task(
                        message.name,
                        args=message.args,
                        kwargs=message.kwargs,
                        headers=message.headers,
                        route_name=message.route_name,
                        producer=producer,
                        ignore_result=True,
                    )
                except (OperationalError, OSError) as exc:
                    raise PublishError(index, exc) from exc


def publisher_for(app: Celery) -> Publisher:
    return SendTaskPublisher(app)
