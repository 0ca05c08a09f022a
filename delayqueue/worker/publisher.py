"""What the dispatcher hands a publisher and what it may raise: one Celery task message per
send, the publisher's interface (``publisher_choice.publisher_for`` picks one), and the publisher
every broker has: Celery's own ``send_task``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from celery import Celery
from kombu.exceptions import OperationalError

from delayqueue.integrations import otel


@dataclass(frozen=True)
class TaskMessage:
    """One Celery task message to publish for one dispatch of a job."""

    name: str  # the task the Celery worker runs (delayqueue.run_task for plain tasks)
    args: list[Any]
    kwargs: dict[str, Any]
    headers: dict[str, str]
    route_name: str  # the task whose routing (queue, exchange) applies
    argsrepr: str | None = None  # what Flower shows as the arguments (default: their repr)


class PublishError(Exception):
    """The broker refused a message: ``published`` messages before it went out."""

    def __init__(self, published: int, cause: BaseException) -> None:
        super().__init__(f"broker refused the message after {published} were published: {cause}")
        self.published = published
        self.cause = cause


class Publisher(Protocol):
    # Messages already waiting on the broker's list at the last publish (0 when not known):
    # Celery workers falling behind, which the dispatcher answers with batches.
    waiting: int

    def publish(self, messages: list[TaskMessage]) -> None:
        """Publish in order; raise PublishError saying how many went out."""

    def backlog(self) -> int | None:
        """Messages waiting on the broker now, on the queues this publisher published to
        (taken by no Celery worker yet); None when the broker cannot say."""
        ...

    def queue_of(self, message: TaskMessage) -> str | None:
        """The Celery queue ``message`` goes to, when this publisher routes it itself."""
        ...

    def close(self) -> None:
        """Let go of any connection of its own."""

    def warm_up(self, names: list[str]) -> None:
        """Connect to the broker and get ready to publish messages of the tasks ``names``
        now, so that the first due job does not wait for it."""


class SendTaskPublisher:
    """Celery's ``send_task`` on one pooled producer: any broker."""

    waiting = 0  # send_task does not say

    def backlog(self) -> int | None:
        return None

    def queue_of(self, message: TaskMessage) -> str | None:
        return None

    def __init__(self, app: Celery) -> None:
        self.app = app

    def close(self) -> None:
        """Nothing of its own: the producer pool is the app's."""

    def warm_up(self, names: list[str]) -> None:
        with self.app.producer_or_acquire() as producer:
            producer.connection.ensure_connection(max_retries=1)

    def publish(self, messages: list[TaskMessage]) -> None:
        with self.app.producer_or_acquire() as producer:
            for index, message in enumerate(messages):
                try:
                    # (a traced job's: Celery's own publish span, if any, in the job's trace)
                    with otel.job_context(message.headers):
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
