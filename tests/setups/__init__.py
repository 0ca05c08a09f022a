"""Celery apps set up the ways users set them up (tests/delay_worker/test_celery_setups.py): each
is run by a real prefork Celery worker of its own, with a delay worker that uses the same app."""
