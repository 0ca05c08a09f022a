"""The delayed-jobs admin through Django's test client: its URLs, users with exactly the
permissions a test names, a page's text and messages, an action posted with its CSRF-checked
form (Django's test client posts as a browser with the token would)."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

Q = "tests"


def url(name: str, *args: str) -> str:
    return reverse(f"admin:delayqueue_delayedjob_{name}", args=args)


def user_client(django_user_model: Any, name: str, *perms: str, staff: bool = True) -> Client:
    user = django_user_model.objects.create_user(name, password="pw", is_staff=staff)
    for codename in perms:
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label="delayqueue", codename=codename)
        )
    client = Client()
    client.force_login(user)
    return client


def text(response: Any) -> str:
    return response.content.decode()


def messages_of(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]] if response.context else []


def post(client: Client, action: str, *ids: str, follow: bool = True, **extra: str) -> Any:
    return client.post(url("act", Q), {"action": action, "ids": list(ids), **extra}, follow=follow)
