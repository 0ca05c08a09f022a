"""Settings for the demo project, read from the environment with laptop-friendly defaults."""

from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()

SECRET_KEY = env.str(
    "SECRET_KEY", default="django-insecure-delayqueue-demo-key-do-not-use-in-production"
)
DEBUG = env.bool("DEBUG", default=True)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["*"] if DEBUG else [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "delayqueue",
    "orders_demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "orders_demo.urls"
WSGI_APPLICATION = "orders_demo.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # The web process and the Celery worker write to the same file: wait instead of failing.
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("timeout", 20)

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = env.str("TIME_ZONE", default="UTC")
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# Database 5 of a local Redis: the demo's keys (delayqueue's and Celery's queues) stay out of
# database 0, where a Redis already running on this machine keeps its data.
REDIS_URL = env.str("REDIS_URL", default="redis://127.0.0.1:6379/5")

CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=REDIS_URL)

# DEBUG is on by default here: its 500 page lists the settings and the environment, and
# Django hides only settings whose names look secret, not the password inside a URL.
DEFAULT_EXCEPTION_REPORTER_FILTER = "delayqueue.observability.error_reports.SecretUrlsFilter"
CELERY_RESULT_BACKEND = None
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_IGNORE_RESULT = True
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# REDIS_CLUSTER=true: REDIS_URL names a node of a Redis Cluster (then set CELERY_BROKER_URL to a
# Redis or RabbitMQ broker of its own: Celery has no Cluster transport).
DELAYQUEUE = {
    "REDIS_URL": REDIS_URL,
    "REDIS_CLUSTER": env.bool("REDIS_CLUSTER", default=False),
    # Periodic jobs with no beat: planned by the delay workers, on the admin's Schedules page.
    "SCHEDULES": {
        "overdue-orders-report": {
            "task": "orders_demo.tasks.report_overdue_orders",
            "every": 60,
            "queue": "orders",
        },
    },
}

# How long a customer has to pay before the order is closed and its stock released.
ORDER_PAYMENT_TIMEOUT = env.int("ORDER_PAYMENT_TIMEOUT", default=1800)

# Django's Tasks framework on delayqueue: send_payment_reminder (orders_demo/tasks.py) is a
# Django @task, enqueued with run_after like any Django task; delayqueue runs it. A reminder
# sent after the payment window closed is worse than none: it expires (docs/limits.md) when
# it cannot start by the end of the window (it is due half way through), after an outage or
# a backlog, and goes to dead with the reason "expired" instead (a minute at least: a window
# of seconds, as the demo's quick runs use, leaves no room for a worker that starts late).
TASKS = {
    "default": {
        "BACKEND": "delayqueue.tasks_backend.DelayQueueBackend",
        "QUEUES": ["default", "orders"],
        "OPTIONS": {"EXPIRES": max(60, ORDER_PAYMENT_TIMEOUT // 2)},
    }
}

# TRACE_TO_CONSOLE=true: each process prints its OpenTelemetry spans (orders_demo/tracing.py,
# docs/tracing.md; needs opentelemetry-sdk): the order's timeout in the order request's trace.
if env.bool("TRACE_TO_CONSOLE", default=False):
    from orders_demo.tracing import export_to_console

    export_to_console()
    MIDDLEWARE.insert(0, "orders_demo.tracing.request_spans")

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain"},
    },
    "loggers": {
        "delayqueue": {"handlers": ["console"], "level": "INFO", "propagate": False},
        "orders_demo": {"handlers": ["console"], "level": "INFO", "propagate": False},
    },
}
