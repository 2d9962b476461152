"""What Django's error pages and mails may show of the settings (DEBUG, or an admin's
error mail): the Redis password rides in REDIS_URL, the broker URL and the channel
layer's hosts, and a database password in DATABASES, whose names Django's own filter
(API, TOKEN, KEY, SECRET, PASS, SIGNATURE) does not catch."""

import re

from django.views.debug import SafeExceptionReporterFilter


class SettingsFilter(SafeExceptionReporterFilter):
    hidden_settings = re.compile(
        "API|TOKEN|KEY|SECRET|PASS|SIGNATURE|HTTP_COOKIE|URL|BROKER|CHANNEL_LAYERS|DATABASES|CACHES",
        flags=re.IGNORECASE,
    )
