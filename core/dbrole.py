"""What a runner host's PostgreSQL role may touch (docs/hosts.md).

Until runner hosts talk to the web host through an API of their own (runner hosts,
part 2), their agent, worker and gateway share the instance's database. Their role gets
the rows of every table but those that would let a stolen runner sign in or pose as
another machine: browser sessions, invitations, API tokens' digests and hosts' token
digests (the last two live in tables of their own for this). No DDL: migrations run on
the web host. What stays open (users' password hashes, every other row) is said in
docs/hosts.md.

Granted again after each upgrade (`prepare` does it when BERTH_RUNNER_DB_ROLE is set):
a table a migration made is not covered until then.
"""

from django.db import connection, transaction
from psycopg import sql

# Tables a runner never reads or writes.
CLOSED = ("django_session", "accounts_invitation", "accounts_tokendigest", "sandbox_hosttoken")


class RoleRefused(Exception):
    """Said to the operator as is."""


def grant(role: str) -> list[str]:
    """Grant `role` what a runner needs on the current database; returns the tables it
    was given. Idempotent, and from nothing each time: a grant of an older release
    that no longer holds is taken back."""
    if connection.vendor != "postgresql":
        raise RoleRefused(
            "A runner's database role needs PostgreSQL (one database shared by every "
            f"host); this database is {connection.vendor}."
        )
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role])
        if cursor.fetchone() is None:
            raise RoleRefused(
                f"PostgreSQL has no role {role!r}: create it first "
                f"(CREATE ROLE {role} LOGIN PASSWORD '…'), then grant again."
            )
        cursor.execute("SELECT current_schema()")
        schema = sql.Identifier(cursor.fetchone()[0])
        who = sql.Identifier(role)
        cursor.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(schema, who))
        cursor.execute(
            sql.SQL("GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA {} TO {}").format(
                schema, who
            )
        )
        given = []
        for table in connection.introspection.table_names(cursor):
            name = sql.Identifier(table)
            cursor.execute(sql.SQL("REVOKE ALL ON {} FROM {}").format(name, who))
            if table not in CLOSED:
                cursor.execute(
                    sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON {} TO {}").format(name, who)
                )
                given.append(table)
        return given
