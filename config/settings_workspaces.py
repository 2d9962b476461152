"""The workspaces' caps, read from the environment (config.settings imports them all):
what one file, push, upload, commit tree, search and quick open may cost."""

import os

from config.environment import envint

# Workspaces: the largest file a commit may hold, and the largest push (after gzip).
WORKSPACE_MAX_FILE_BYTES = envint("WORKSPACE_MAX_FILE_MB", 10) * 1024 * 1024
GIT_MAX_PUSH_BYTES = envint("GIT_MAX_PUSH_MB", 100) * 1024 * 1024
# Files dropped onto the tree, in one batch (workspaces.uploads); Django refuses more
# parts than this in a body before the view reads any (TooManyFilesSent).
WORKSPACE_MAX_UPLOAD_FILES = envint("WORKSPACE_MAX_UPLOAD_FILES", 100)
DATA_UPLOAD_MAX_NUMBER_FILES = WORKSPACE_MAX_UPLOAD_FILES
# A folder's README.md is rendered on the workspace page up to this size (workspaces.readme).
WORKSPACE_README_MAX_BYTES = envint("WORKSPACE_README_MAX_KB", 256) * 1024
# What one commit's tree may expand to, a name repeated counting each time it appears
# (workspaces.treesize): checked on every door that makes a commit and at hydration.
WORKSPACE_MAX_TREE_ENTRIES = envint("WORKSPACE_MAX_TREE_ENTRIES", 100_000)
WORKSPACE_MAX_TREE_BYTES = envint("WORKSPACE_MAX_TREE_MB", 2048) * 1024 * 1024
# Search over a commit (workspaces.search): what one search may cost, whatever is asked.
# Files past SEARCH_MAX_FILE_KB are skipped and named; a search stops (and says so) at
# SEARCH_MAX_MATCHES lines, SEARCH_MAX_SCAN_MB read or SEARCH_TIME_S, a regex included.
# A line past SEARCH_MAX_LINE_BYTES is searched as if it ended there; a pattern (RE2) may
# take SEARCH_REGEX_MAX_KB to build and match (its max_mem), or is refused.
SEARCH_MAX_QUERY_CHARS = envint("SEARCH_MAX_QUERY_CHARS", 256)
SEARCH_MAX_FILE_BYTES = envint("SEARCH_MAX_FILE_KB", 1024) * 1024
SEARCH_MAX_LINE_BYTES = envint("SEARCH_MAX_LINE_BYTES", 4096)
SEARCH_REGEX_MAX_BYTES = envint("SEARCH_REGEX_MAX_KB", 1024) * 1024
SEARCH_MAX_MATCHES = envint("SEARCH_MAX_MATCHES", 500)
SEARCH_MAX_SCAN_BYTES = envint("SEARCH_MAX_SCAN_MB", 256) * 1024 * 1024
SEARCH_TIME_S = float(os.environ.get("SEARCH_TIME_S", "5"))
# Quick open (Ctrl/⌘-P) lists at most this many paths of a commit.
QUICK_OPEN_MAX_PATHS = envint("QUICK_OPEN_MAX_PATHS", 50_000)
