#!/usr/bin/env python
import os
import sys
from pathlib import Path

from django.core.management import BaseCommand, ManagementUtility


class Utility(ManagementUtility):
    def fetch_command(self, subcommand: str) -> BaseCommand:
        # Every command may open the SQLite database in DATA_DIR, which importing the
        # settings no longer makes: made here, once the settings are loaded (so a
        # --settings option is honoured).
        from django.conf import settings

        Path(settings.DATA_DIR).mkdir(mode=0o700, parents=True, exist_ok=True)
        return super().fetch_command(subcommand)


if __name__ == "__main__":
    # What any command writes (the database, keys, repositories, transcripts, logs) is
    # for Berth's own user only: other local users must not read DATA_DIR
    # (docs/security.md 28). Daphne and Celery get the same from scripts/supervise.
    os.umask(0o077)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    Utility(sys.argv).execute()
