"""The admin tests' users: one with every delayqueue permission, one that may only look."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.support.admin_pages import user_client


@pytest.fixture
def admin_client(django_user_model: Any) -> Client:
    """Staff with view, change and delete on delayed jobs (not a superuser)."""
    return user_client(django_user_model, "full", "view_jobs", "change_jobs", "delete_jobs")


@pytest.fixture
def viewer(django_user_model: Any) -> Client:
    return user_client(django_user_model, "viewer", "view_jobs")
