"""An app whose workers accept pickle only: they discard delayqueue's JSON messages."""

from celery import Celery

app = Celery("pickle_app")
app.conf.accept_content = ["pickle"]
