"""Logs of sandboxes' output: the append-only store with its cursor (`logstore`) and the
follower that copies a container's output into it (`follow`). Below runs: it knows a log
by its owner's public id, and masks what it is given to mask, nothing more."""
