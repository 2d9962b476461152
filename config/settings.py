"""Berth settings: one module, read from the environment.

Every value has a default that works on one machine with `make run`; production
deployments set SECRET_KEY, ALLOWED_HOSTS, DATABASE_URL and REDIS_URL. How a value is
read (the env* helpers, the generated key, Redis's password file): config.environment.
"""

import hashlib
import os
import secrets
from pathlib import Path
from typing import cast

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from django.utils.functional import lazy

from config.environment import (
    envbool,
    envint,
    envlist,
    envobject,
    generated_secret_key,
    with_password,
)

BASE_DIR = Path(__file__).resolve().parent.parent

# Importing the settings writes nothing (a script or a test process that only reads them
# leaves no trace): DATA_DIR is made by manage.py before a command runs (`make run`'s
# prepare among them) and by what first writes into it, like the generated key below.
DATA_DIR = Path(os.environ.get("DATA_DIR", BASE_DIR / "var")).resolve()

# What this machine is (docs/hosts.md): "all" (one machine: `make run`), "web" (the web
# host of several) or "runner" (a host that runs sandboxes for the web host).
BERTH_ROLE = os.environ.get("BERTH_ROLE", "all")
if BERTH_ROLE not in ("all", "web", "runner"):
    raise ImproperlyConfigured(f'BERTH_ROLE must be "all", "web" or "runner", not {BERTH_ROLE!r}.')
if BERTH_ROLE == "runner":
    # A runner host holds no key that signs browser sessions or API tokens: its
    # processes sign nothing with SECRET_KEY, so each has a throwaway of its own.
    if os.environ.get("SECRET_KEY"):
        raise ImproperlyConfigured(
            "A runner host must not hold SECRET_KEY (it signs sign-in sessions and keys "
            "API tokens' hashes): unset it here; the runner needs only the shared keys "
            "(docs/hosts.md)."
        )
    SECRET_KEY = secrets.token_urlsafe(50)
else:
    # From the environment, else generated into DATA_DIR on first use (a lazy str:
    # Django reads it when it first signs or hashes something).
    SECRET_KEY = os.environ.get("SECRET_KEY") or cast(
        str, lazy(generated_secret_key, str)(DATA_DIR)
    )
DEBUG = envbool("DEBUG")
ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]")

# Sandboxes are served on their own domains so untrusted code never runs on the
# app's origin (docs/security.md).
PREVIEW_DOMAIN = os.environ.get("PREVIEW_DOMAIN", "preview.localhost")
APPS_DOMAIN = os.environ.get("APPS_DOMAIN", "apps.localhost")
ALLOWED_HOSTS += [f".{PREVIEW_DOMAIN}", f".{APPS_DOMAIN}"]

# Names and labels every container, volume and image this instance creates, so
# several instances (a dev server, test runs) can share one Docker engine. Past one
# machine it is set explicitly, the same on every host: its default, a hash of the
# DATA_DIR path, would differ between machines.
if os.environ.get("BERTH_ROLE", "all") != "all" and not os.environ.get("BERTH_INSTANCE"):
    raise ImproperlyConfigured(
        "With more than one host, set BERTH_INSTANCE, the same on every host (docs/hosts.md)."
    )
BERTH_INSTANCE = (
    os.environ.get("BERTH_INSTANCE") or hashlib.sha256(str(DATA_DIR).encode()).hexdigest()[:8]
)
SANDBOX_IMAGE = os.environ.get("SANDBOX_IMAGE", "berth-sandbox:bookworm")
# The Docker host a new sandbox is made on (sandbox.models.Sandbox.host): one value until
# runner agents on several hosts share a database.
SANDBOX_HOST = os.environ.get("BERTH_SANDBOX_HOST", "local")
# What a host's own processes keep between restarts, none of it the web host's data (the
# session followers' cursors): its own folder, BERTH_STATE_DIR on a runner host.
HOST_STATE_DIR = Path(os.environ.get("BERTH_STATE_DIR") or DATA_DIR / "hosts" / SANDBOX_HOST)
# What this host's agent says of it in its heartbeat, besides its engine's facts
# (sandbox.heartbeat): labels for placement, "k=v,k2=v2".
# A runner host's PostgreSQL role, granted what runners need at each `prepare` (core.dbrole).
RUNNER_DB_ROLE = os.environ.get("BERTH_RUNNER_DB_ROLE", "")
HOST_HEARTBEAT_S = float(os.environ.get("HOST_HEARTBEAT_S", "5"))
HOST_LABELS = dict(item.split("=", 1) for item in envlist("BERTH_HOST_LABELS", "") if "=" in item)
SANDBOX_IMAGE_BUILD_DIR = Path(os.environ.get("SANDBOX_IMAGE_BUILD_DIR", "/var/tmp"))  # noqa: S108 (root-only build)

# Redis asks for a password (docs/security.md 28): kept in a 0600 file outside any
# checkout, owned by the user that runs Berth (root by default), written by
# `scripts/host-setup redis`, and used when REDIS_URL names none
# (an external Redis takes its password in REDIS_URL). No file, no password: a Redis
# started by an older host-setup, until host-setup restarts it with one.
REDIS_PASSWORD_FILE = Path(os.environ.get("REDIS_PASSWORD_FILE", "/etc/berth/redis.password"))
REDIS_URL = with_password(
    os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"), REDIS_PASSWORD_FILE
)

INSTALLED_APPS = [
    "daphne",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "channels",
    "django_htmx",
    "ninja",  # serves the API docs' assets itself, no CDN
    "accounts",
    "workspaces",
    "sandbox",
    "runs",
    "sessions",
    "previews",
    "deploys",
    "agent",
]


MIDDLEWARE = [
    "config.middleware.BodySizeLimitMiddleware",
    "config.middleware.ApiErrorShapeMiddleware",
    # Django's own, with the hooks that block on nothing run on daphne's loop.
    "config.loop_middleware.SecurityMiddleware",
    "config.loop_middleware.SessionMiddleware",
    "config.loop_middleware.CommonMiddleware",
    "config.loop_middleware.CsrfViewMiddleware",
    "config.loop_middleware.AuthenticationMiddleware",
    "config.loop_middleware.MessageMiddleware",
    "config.loop_middleware.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "config.urls"
ASGI_APPLICATION = "config.asgi.application"

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

# SQLite is written concurrently by daphne, the Celery worker, beat and the runner
# agent: WAL lets readers run beside the writer, IMMEDIATE takes the write lock at
# BEGIN (no deadlock-prone lock upgrades), and the timeout waits instead of failing.
_SQLITE_OPTIONS = {
    "transaction_mode": "IMMEDIATE",
    "timeout": 20,
    "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
}
DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL", f"sqlite:///{DATA_DIR / 'berth.sqlite3'}"),
        # Kept by each thread that asks (web requests run on kept threads:
        # config.request_threads), checked before reuse after an error.
        conn_max_age=envint("DB_CONN_MAX_AGE", 60),
        conn_health_checks=True,
    )
}
# The runner agent is one long-lived process with a few threads, which look at the
# database several times a second: they keep their connections longer.
AGENT_DB_CONN_MAX_AGE = envint("AGENT_DB_CONN_MAX_AGE", 300)
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = _SQLITE_OPTIONS
    if BERTH_ROLE != "all":
        # SQLite is one file on one machine: hosts share their state in PostgreSQL.
        raise ImproperlyConfigured(
            f"BERTH_ROLE={BERTH_ROLE}: with more than one host Berth needs PostgreSQL; set "
            "DATABASE_URL (the same database on every host) (docs/hosts.md)."
        )

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "static"
# Runs' artifacts (runs.artifacts): DATA_DIR/artifacts, or a storage backend an operator
# names (django-storages' S3Storage, say) with its options as a JSON object.
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    "artifacts": {
        "BACKEND": os.environ.get("ARTIFACTS_STORAGE_BACKEND", "runs.artifacts.DataDirStorage"),
        "OPTIONS": envobject("ARTIFACTS_STORAGE_OPTIONS"),
    },
}

# Request bodies past this are refused with 413 `too_large` (a 10 MB file fits
# base64-encoded). Daphne reads a whole body before Django sees it, so this is a
# cap on what we accept, not on what crosses the wire.
MAX_REQUEST_BODY = envint("MAX_REQUEST_BODY", 16 * 1024 * 1024)
DATA_UPLOAD_MAX_MEMORY_SIZE = MAX_REQUEST_BODY

# Safe by default: cookies are host-only (no SESSION_COOKIE_DOMAIN), so a preview
# host can never read or set the app's session.
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"
SESSION_COOKIE_SECURE = envbool("SECURE_COOKIES")
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS")
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT")
SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 0)
if envbool("BEHIND_TLS_PROXY"):
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}

# Berth's keys (core.keys, docs/hosts.md "Keys"), none derived from SECRET_KEY: each
# from here, else from its file in KEYS_DIR, else made there by the web host (a runner
# host never makes one). Shared by every host: the channel layer's seal, the gateways'
# proof and the preview-cookie key. The web host's alone: the workspace secrets' key.
# A runner host's own, given to it: its sealed values' key (`manage.py hosts key`)
# and its internal API token (`manage.py hosts add`). KEYS_DIR is fixed at start (a
# test that points DATA_DIR elsewhere must not move the process's keys).
KEYS_DIR = Path(os.environ["BERTH_KEYS_DIR"]) if os.environ.get("BERTH_KEYS_DIR") else DATA_DIR
BERTH_HOST_SECRETS_KEY = os.environ.get("BERTH_HOST_SECRETS_KEY", "")
BERTH_HOST_TOKEN = os.environ.get("BERTH_HOST_TOKEN", "")
BERTH_CHANNEL_LAYER_KEY = os.environ.get("BERTH_CHANNEL_LAYER_KEY", "")
BERTH_SECRETS_KEY = os.environ.get("BERTH_SECRETS_KEY", "")
BERTH_GATEWAY_KEY = os.environ.get("BERTH_GATEWAY_KEY", "")
BERTH_PREVIEW_COOKIE_KEY = os.environ.get("BERTH_PREVIEW_COOKIE_KEY", "")
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "core.channel_layer.SealedRedisChannelLayer",
        # socket_timeout None: channels_redis waits for messages with a 5 s blocking
        # pop, and redis-py 8's default 5 s read timeout would otherwise end every
        # quiet WebSocket (a log with no output for 5 s) with a 1011 (channels_redis#422).
        "CONFIG": {
            "hosts": [{"address": REDIS_URL, "socket_timeout": None}],
            "prefix": f"berth-{BERTH_INSTANCE}",
        },
    }
}

CELERY_BROKER_URL = REDIS_URL

# Error pages and mails hide the settings that carry a password (config/reporting.py).
DEFAULT_EXCEPTION_REPORTER_FILTER = "config.reporting.SettingsFilter"
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_RESULT_BACKEND = None
CELERY_TASK_IGNORE_RESULT = True
# A worker killed mid-task gets it redelivered; tasks are written to be harmless
# when run twice (docs/architecture.md, "Processes").
CELERY_TASK_ACKS_LATE = True
# Sandbox work goes to its host's queue, `runner.<host>` (runs.tasks.runner_queue: a
# run's prepare to the host it was placed on); retention touches no engine and goes to
# the web host's default queue. Tests name theirs per instance (settings_test).
CELERY_TASK_DEFAULT_QUEUE = "celery"
RUNNER_QUEUE_PREFIX = "runner"
CELERY_TASK_ROUTES = {
    "runner.tasks.apply_retention": {"queue": CELERY_TASK_DEFAULT_QUEUE},
    "runner.tasks.evict_caches": {"queue": CELERY_TASK_DEFAULT_QUEUE},
    "runner.tasks.*": {"queue": f"{RUNNER_QUEUE_PREFIX}.{SANDBOX_HOST}"},
}
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A broker that drops packets (rather than refusing) must not hold a request's task send
# for the operating system's TCP timeout: a send fails in seconds (core.broker).
CELERY_BROKER_TRANSPORT_OPTIONS = {"socket_connect_timeout": 2, "socket_timeout": 5}
CELERY_BEAT_SCHEDULE_FILENAME = str(DATA_DIR / "celerybeat-schedule")
# CELERY_BEAT_SCHEDULE: set below, with the settings its tasks read.

# Sign-in throttling: this many failures per username (and per address) within the
# window locks further attempts until the window passes.
SIGNIN_MAX_FAILURES = envint("SIGNIN_MAX_FAILURES", 5)
SIGNIN_WINDOW_S = envint("SIGNIN_WINDOW_S", 15 * 60)

# API tokens: default and maximum lifetime.
TOKEN_DEFAULT_DAYS = envint("TOKEN_DEFAULT_DAYS", 30)
TOKEN_MAX_DAYS = envint("TOKEN_MAX_DAYS", 365)
# An open WebSocket checks its access again at least this often (seconds); a revoked
# token or a removed member is told at once, an expiry is timed: this is the backstop.
WEBSOCKET_ACCESS_RECHECK_S = envint("WEBSOCKET_ACCESS_RECHECK_S", 30)
INVITATION_DAYS = envint("INVITATION_DAYS", 7)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "INFO"}},
}

# Workspaces: file, push, upload, tree and search caps (config/settings_workspaces.py).
from config.settings_workspaces import *  # noqa: E402,F403

# Runs: the operator's maxima (workspace.toml values above are clamped with a warning,
# API values above are refused), fixed sandbox limits, and the images runs may use.
RUN_MAX_CPUS = float(os.environ.get("RUN_MAX_CPUS", "2"))
RUN_MAX_MEMORY_MB = envint("RUN_MAX_MEMORY_MB", 4096)
RUN_MAX_DISK_MB = envint("RUN_MAX_DISK_MB", 10240)
RUN_MAX_TIMEOUT_S = envint("RUN_MAX_TIMEOUT_S", 3600)
RUN_PIDS_LIMIT = envint("RUN_PIDS_LIMIT", 256)
RUN_NOFILE = envint("RUN_NOFILE", 4096)
RUN_STOP_GRACE_S = envint("RUN_STOP_GRACE_S", 5)
# Files and folders (inodes) one sandbox may hold on the engine's disk — /workspace,
# /deps while setup fills it, a release build's writable layer — beside disk_mb's bytes:
# the engine's filesystem has no quotas, so empty files could otherwise exhaust it.
SANDBOX_MAX_INODES = envint("SANDBOX_MAX_INODES", 100_000)
ALLOWED_IMAGES = envlist("ALLOWED_IMAGES", SANDBOX_IMAGE)
RUN_RECONCILE_EVERY_S = envint("RUN_RECONCILE_EVERY_S", 30)
RUN_STALE_QUEUED_S = envint("RUN_STALE_QUEUED_S", 120)

# Run logs (logs/logstore.py): stdout+stderr kept per run, and the longest single entry
# (a longer chunk is split). Past the total, one marker says so and output is dropped.
RUN_LOG_MAX_BYTES = envint("RUN_LOG_MAX_BYTES", 10 * 1024 * 1024)
RUN_LOG_MAX_LINE = envint("RUN_LOG_MAX_LINE", 16 * 1024)
# Each sandbox's share of the runner agent (logs/follow.py, Budget): lines and bytes of
# output a second stored from one container (a run's, or a session's execs together),
# with a burst of one second's worth. Above the 50,000 lines/s a log must stream; past
# it, lines are dropped and a counted note says so ("N lines dropped: ...").
SANDBOX_LOG_LINES_PER_S = envint("SANDBOX_LOG_LINES_PER_S", 100_000)
SANDBOX_LOG_BYTES_PER_S = envint("SANDBOX_LOG_MB_PER_S", 16) * 1024 * 1024

# Run outputs (issue "the rest of the contract"): artifacts kept per run (total and
# count), the changes diff shown, and how long logs and artifacts are kept (beat).
RUN_ARTIFACTS_MAX_BYTES = envint("RUN_ARTIFACTS_MAX_MB", 100) * 1024 * 1024
RUN_ARTIFACTS_MAX_FILES = envint("RUN_ARTIFACTS_MAX_FILES", 1000)
RUN_CHANGES_MAX_DIFF_BYTES = envint("RUN_CHANGES_MAX_DIFF_KB", 512) * 1024
RUN_CHANGES_MAX_PATHS = envint("RUN_CHANGES_MAX_PATHS", 1000)
RUN_RETENTION_DAYS = envint("RUN_RETENTION_DAYS", 30)
# Dependency caches (/deps volumes): past this total, least recently used go first.
DEPS_CACHE_MAX_BYTES = envint("DEPS_CACHE_MAX_MB", 20 * 1024) * 1024 * 1024


# Previews (previews/): how long a preview may take to answer its health check, how
# long it may sit with no proxied request, and the proxy's caps (request bodies arrive
# whole from daphne, so their cap is also a memory bound).
# Where Berth's app is. Every link in an answer (the API, MCP, `git push`'s remote:
# lines, Activity) is absolute under it, so an agent can follow one from wherever it
# runs. Unset: where `make run` serves, http://<BERTH_HOST>:<BERTH_PORT>, localhost for
# a loopback or wildcard host (as make run says). It must be absolute (http/https).
# A preview host's links back to the app and its framing rule use it only when it was
# given (APP_URL_GIVEN); without it they name localhost on the port the request came
# in on (right for the default *.localhost PREVIEW_DOMAIN behind any port).
APP_URL_GIVEN = os.environ.get("APP_URL", "").strip().rstrip("/")
if APP_URL_GIVEN and not APP_URL_GIVEN.startswith(("http://", "https://")):
    raise ImproperlyConfigured(f"APP_URL must be an absolute http(s) URL, not {APP_URL_GIVEN!r}")
_berth_host = os.environ.get("BERTH_HOST", "127.0.0.1")
if _berth_host in ("", "127.0.0.1", "::1", "0.0.0.0", "::", "localhost"):  # noqa: S104
    _berth_host = "localhost"
elif ":" in _berth_host:
    _berth_host = f"[{_berth_host}]"
APP_URL = APP_URL_GIVEN or f"http://{_berth_host}:{os.environ.get('BERTH_PORT', '8000')}"
# Where a runner host reaches the internal API (/internal/v1; docs/hosts.md).
BERTH_WEB_URL = os.environ.get("BERTH_WEB_URL", "").strip().rstrip("/") or APP_URL

# The port preview and release hosts are served on: the preview gateway's (`manage.py
# preview_gateway`, started by `make run`), the only process that connects into
# sandboxes. Empty: the port of the request that asks (an edge in front of Berth then
# routes preview and release hosts to the gateway).
PREVIEW_PORT = os.environ.get("PREVIEW_PORT", "")
# Where this host's web process reaches the gateway (an agent's fetch_preview goes
# through it, as a browser's request would); `make run` sets it beside PREVIEW_PORT.
PREVIEW_GATEWAY_ADDRESS = os.environ.get(
    "PREVIEW_GATEWAY_ADDRESS", f"127.0.0.1:{PREVIEW_PORT}" if PREVIEW_PORT else ""
)
PREVIEW_START_DEADLINE_S = envint("PREVIEW_START_DEADLINE_S", 60)

# Sessions (docs/sessions.md): a team's limit of live ones (frozen ones hold memory, so
# they count) and the default maxima of its four numbers; an admin sets a team's own.
SESSION_MAX_PER_TEAM = envint("SESSION_MAX_PER_TEAM", 4)
SESSION_IDLE_FREEZE_S = envint("SESSION_IDLE_FREEZE_S", 5 * 60)
SESSION_IDLE_STOP_S = envint("SESSION_IDLE_STOP_S", 30 * 60)
SESSION_LIFETIME_S = envint("SESSION_LIFETIME_S", 8 * 3600)
SESSION_RETENTION_S = envint("SESSION_RETENTION_S", 7 * 24 * 3600)
# The most a team's admin may set (sessions.policy): the host's memory and disk are the
# operator's, so a team raises its own maxima up to these, never past them.
SESSION_CEILING_SESSIONS = envint("SESSION_CEILING_SESSIONS", 20)
SESSION_CEILING_IDLE_S = envint("SESSION_CEILING_IDLE_S", 24 * 3600)
SESSION_CEILING_LIFETIME_S = envint("SESSION_CEILING_LIFETIME_S", 7 * 24 * 3600)
SESSION_CEILING_RETENTION_S = envint("SESSION_CEILING_RETENTION_S", 90 * 24 * 3600)
# A session that is not ready this long after its start failed (its setup included).
SESSION_START_DEADLINE_S = envint("SESSION_START_DEADLINE_S", 300)
# A write waits this long for the ready sessions on its branch to apply it (sessions.sync);
# past it the answer says so, and each applies it before its next exec anyway.
SESSION_SYNC_WAIT_S = envint("SESSION_SYNC_WAIT_S", 10)
# A read of a session's files (its changes, a commit of them) waits this long for its agent.
SESSION_READ_WAIT_S = envint("SESSION_READ_WAIT_S", 60)
# A read's objects live in a scratch store of its own, never the workspace's
# (sessions.snapstore): removed once a newer read of the session is done, or this long
# after it was done (a door that still wants it asks for a new read) ...
SESSION_READ_KEEP_S = envint("SESSION_READ_KEEP_S", 5 * 60)
# ... and all of a host's together hold at most this much: a read past it fails, typed
# (503 session_not_read), until older ones are gone. Above the tree cap, so one
# session's largest read fits.
SESSION_READS_MAX_BYTES = envint("SESSION_READS_MAX_MB", 4096) * 1024 * 1024
# A session a preview serves from (previews.of_sessions) is announced to the preview
# gateways as freezing this long before it is paused: longer than a gateway keeps a
# looked-up preview (2 s), so one that missed the announcement has looked again by then.
SESSION_FREEZE_NOTICE_S = float(os.environ.get("SESSION_FREEZE_NOTICE_S", "2.5"))
# A request to a preview of a frozen session waits this long for it to resume.
SESSION_PREVIEW_RESUME_S = float(os.environ.get("SESSION_PREVIEW_RESUME_S", "15"))
PREVIEW_IDLE_TIMEOUT_S = envint("PREVIEW_IDLE_TIMEOUT_S", 30 * 60)
# After a deploy switches the release host to a new release, the previous release's
# process keeps running this long, so requests already on their way to it finish.
RELEASE_DRAIN_S = envint("RELEASE_DRAIN_S", 10)
PREVIEW_HEALTH_EVERY_S = float(os.environ.get("PREVIEW_HEALTH_EVERY_S", "5"))
# A request to a preview that is still starting waits up to this long for it to be
# ready (woken by the move itself) before it gets the "starting…" page: a client that
# asks right after starting one gets the app's answer, not a 503 to retry.
PREVIEW_HOLD_S = float(os.environ.get("PREVIEW_HOLD_S", "5"))
PREVIEW_MAX_BODY_BYTES = envint("PREVIEW_MAX_BODY_MB", 32) * 1024 * 1024
PREVIEW_MAX_CONNECTIONS = envint("PREVIEW_MAX_CONNECTIONS", 128)
PREVIEW_MAX_WS_MESSAGE_BYTES = envint("PREVIEW_MAX_WS_MESSAGE_MB", 4) * 1024 * 1024
PREVIEW_IDLE_CONNECTION_S = envint("PREVIEW_IDLE_CONNECTION_S", 300)
PREVIEW_TICKET_S = envint("PREVIEW_TICKET_S", 60)
PREVIEW_COOKIE_S = envint("PREVIEW_COOKIE_S", 12 * 3600)
# How long the preview gateway and the web process trust a cached answer about a
# preview cookie's holder. A revoked token, a removed member or a session's new grant
# drops the answers at once (previews.lookups.Lookups.drop); this bounds the time a lost
# signal (a channel layer away, or its sender's queue full) leaves one served.
PREVIEW_VIEWER_TTL_S = float(os.environ.get("PREVIEW_VIEWER_TTL_S", "5"))
# A private preview or release refuses other sites' requests and frames (previews/
# headers.py, "what a private target takes from other sites"). Always on: it is no
# environment setting. Only the tests turn it off (config.settings_test), to show the
# attacks it stops working without it.
PREVIEW_CROSS_SITE_GUARD = True

CELERY_BEAT_SCHEDULE = {
    "apply-retention": {"task": "runner.tasks.apply_retention", "schedule": 3600.0},
    "evict-dependency-caches": {"task": "runner.tasks.evict_caches", "schedule": 600.0},
    "sweep-transcripts": {"task": "sessions.tasks.sweep_transcripts", "schedule": 3600.0},
    "sweep-session-reads": {"task": "sessions.tasks.sweep_reads", "schedule": 60.0},
}

# Quotas and admission (runs/quotas.py). Runs wait in `queued` until admitted: at most
# RUNNER_SLOTS at once on this host, and per team at most QUOTA_MAX_CONCURRENT_RUNS;
# past QUOTA_MAX_QUEUED_RUNS waiting, or the team's CPU-seconds for the (UTC) day, new
# runs are refused. Previews count against QUOTA_MAX_CONCURRENT_PREVIEWS; a team at its
# limit gets its longest-idle preview stopped, unless each served a request within
# QUOTA_PREVIEW_BUSY_S. An operator overrides the team limits per team
# (manage.py set_team_quota). CPU_SECONDS_PER_DAY = 0 means no daily budget.
RUNNER_SLOTS = envint("RUNNER_SLOTS", max(4, 2 * (os.cpu_count() or 1)))
# Half the host by default: one team's flood never holds every slot, so another team's
# run starts at once instead of waiting for one of the flood's to end.
QUOTA_MAX_CONCURRENT_RUNS = envint("QUOTA_MAX_CONCURRENT_RUNS", max(1, RUNNER_SLOTS // 2))
QUOTA_MAX_QUEUED_RUNS = envint("QUOTA_MAX_QUEUED_RUNS", 100)
QUOTA_MAX_CONCURRENT_PREVIEWS = envint("QUOTA_MAX_CONCURRENT_PREVIEWS", 4)
QUOTA_CPU_SECONDS_PER_DAY = envint("QUOTA_CPU_SECONDS_PER_DAY", 8 * 3600)
QUOTA_PREVIEW_BUSY_S = envint("QUOTA_PREVIEW_BUSY_S", 60)
QUOTA_RETRY_AFTER_S = envint("QUOTA_RETRY_AFTER_S", 10)
# How often the runner agent reads each running container's CPU time.
RUN_CPU_SAMPLE_S = float(os.environ.get("RUN_CPU_SAMPLE_S", "1"))

# Egress (sandbox/egress/): the allowlist proxy each sandbox with a policy gets at
# 127.0.0.1:3128 inside its own namespace. EGRESS_HOSTS maps names to addresses before
# DNS is asked ("files.test=127.0.0.1,meta.test=169.254.169.254"); addresses that are
# loopback, private, link-local, multicast or reserved are refused unless listed in
# EGRESS_ALLOWED_ADDRESSES (addresses or networks). Caps are per run.
EGRESS_HOSTS = dict(item.split("=", 1) for item in envlist("EGRESS_HOSTS") if "=" in item)
EGRESS_ALLOWED_ADDRESSES = envlist("EGRESS_ALLOWED_ADDRESSES")
EGRESS_MAX_BYTES = envint("EGRESS_MAX_MB", 2048) * 1024 * 1024
EGRESS_MAX_CONNECTIONS = envint("EGRESS_MAX_CONNECTIONS", 32)
# Connections open to the proxy itself (idle ones included: each holds a descriptor in
# the runner agent), per sandbox and per team; past them a new one is answered 429
# (sandbox_connection_cap / team_connection_cap). The agent lowers the team cap further
# if its own descriptor limit is too small for it (sandbox.egress.service).
EGRESS_MAX_CONNECTIONS_PER_SANDBOX = envint("EGRESS_MAX_CONNECTIONS_PER_SANDBOX", 64)
EGRESS_MAX_CONNECTIONS_PER_TEAM = envint("EGRESS_MAX_CONNECTIONS_PER_TEAM", 256)
# Past this many refusals (429, read for and recorded) in a second from one sandbox,
# further ones are closed unanswered and recorded as one summary a second.
EGRESS_MAX_REFUSALS_PER_S = envint("EGRESS_MAX_REFUSALS_PER_S", 20)
EGRESS_CONNECT_TIMEOUT_S = float(os.environ.get("EGRESS_CONNECT_TIMEOUT_S", "10"))
EGRESS_IDLE_TIMEOUT_S = envint("EGRESS_IDLE_TIMEOUT_S", 300)
# How long a sandbox's command waits for its proxy before giving up (the wrapper).
EGRESS_WAIT_S = envint("EGRESS_WAIT_S", 5)
# Connection records kept per run; past it only the run's totals grow.
EGRESS_MAX_EVENTS = envint("EGRESS_MAX_EVENTS", 1000)
