"""What a runner host's PostgreSQL role may touch (docs/hosts.md).

Until runner hosts talk to the web host through an API of their own (runner hosts,
part 2), their agent, worker and gateway share the instance's database. Their role gets
the rows of the tables they work on, and none of what would let a stolen runner sign in
or pose as another machine: browser sessions, invitations, API tokens' digests and
hosts' token digests (the last two live in tables of their own for this); users,
memberships and tokens it reads but cannot change (a runner never writes them, and a
changed password, role or token owner would be a sign-in). No DDL: migrations run on
the web host. What stays open is said in docs/hosts.md.

Granted again after each upgrade (`prepare` does it when BERTH_RUNNER_DB_ROLE is set):
a table a migration made is not covered until then.
"""

from django.db import connection, transaction
from django.db.backends.utils import CursorWrapper
from psycopg import sql

# Tables a runner never reads or writes (the stored secrets too: what a runner needs of
# them reaches it sealed for its host, runs.secrets).
CLOSED = (
    "django_session",
    "accounts_invitation",
    "accounts_tokendigest",
    "sandbox_hosttoken",
    "runner_secret",
)
# Tables a runner reads alone.
READ_ONLY = ("auth_user", "accounts_membership", "accounts_apitoken")


class RoleRefused(Exception):
    """Said to the operator as is."""


def grant(role: str) -> list[str]:
    """Grant `role` what a runner needs on the current database; returns the tables it
    may write. Idempotent, and from nothing each time: a grant of an older release that
    no longer holds is taken back."""
    if connection.vendor != "postgresql":
        raise RoleRefused(
            "A runner's database role needs PostgreSQL (one database shared by every "
            f"host); this database is {connection.vendor}."
        )
    with transaction.atomic(), connection.cursor() as cursor:
        schema = _refuse_unfit(cursor, role)
        who = sql.Identifier(role)
        cursor.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(schema, who))
        cursor.execute(
            sql.SQL("REVOKE ALL ON ALL SEQUENCES IN SCHEMA {} FROM {}").format(schema, who)
        )
        written = []
        for table in connection.introspection.table_names(cursor):
            name = sql.Identifier(table)
            cursor.execute(sql.SQL("REVOKE ALL ON {} FROM {}").format(name, who))
            if table in CLOSED:
                continue
            if table in READ_ONLY:
                cursor.execute(sql.SQL("GRANT SELECT ON {} TO {}").format(name, who))
                continue
            cursor.execute(
                sql.SQL("GRANT SELECT, INSERT, UPDATE, DELETE ON {} TO {}").format(name, who)
            )
            for sequence in _sequences_of(cursor, table):
                cursor.execute(
                    sql.SQL("GRANT USAGE, SELECT ON SEQUENCE {} TO {}").format(
                        sql.Identifier(sequence), who
                    )
                )
            written.append(table)
        return written


def _refuse_unfit(cursor: CursorWrapper, role: str) -> sql.Identifier:
    """The schema to grant in, once `role` is one a grant can hold: not the web host's
    own (its grants would be revoked), no superuser, no member of it (it would have all
    the web host may), and unable to
    create in the schema (PostgreSQL 14 and older let every role: a runner could then
    make tables, or functions the web host's queries would call)."""
    cursor.execute(
        "SELECT rolsuper OR rolbypassrls, current_user, current_schema(),"
        " pg_has_role(%s, current_user, 'MEMBER'),"
        " has_schema_privilege(%s, current_schema(), 'CREATE')"
        " FROM pg_roles WHERE rolname = %s",
        [role, role, role],
    )
    found = cursor.fetchone()
    if found is None:
        raise RoleRefused(
            f"PostgreSQL has no role {role!r}: create it first "
            f"(CREATE ROLE {role} LOGIN PASSWORD '…'), then grant again."
        )
    mighty, web, schema, in_web, creates = found
    if role == web:
        raise RoleRefused(
            f"{role!r} is the web host's own role: its grants would be taken from it. Give "
            "runners a role of their own (CREATE ROLE berth_runner LOGIN …)."
        )
    if mighty:
        raise RoleRefused(f"{role!r} is a superuser or bypasses row security: no grant holds it.")
    if in_web:
        raise RoleRefused(
            f"{role!r} is, or is a member of, the web host's own role ({web}): give "
            "runners a role of their own (CREATE ROLE berth_runner LOGIN …)."
        )
    if creates:
        raise RoleRefused(
            f"{role!r} may create objects in schema {schema!r} (PostgreSQL 14 and older "
            f"let every role): run REVOKE CREATE ON SCHEMA {schema} FROM PUBLIC, then grant "
            "again."
        )
    return sql.Identifier(schema)


def _sequences_of(cursor: CursorWrapper, table: str) -> list[str]:
    """The sequences a table's columns own (Django's identity columns)."""
    cursor.execute(
        "SELECT s.relname FROM pg_class s JOIN pg_depend d ON d.objid = s.oid"
        " JOIN pg_class t ON d.refobjid = t.oid"
        " WHERE s.relkind = 'S' AND t.relname = %s AND t.relnamespace = s.relnamespace",
        [table],
    )
    return [row[0] for row in cursor.fetchall()]
