"""Every state change of runs: each writes Activity and sends work only after commit."""

import re
from functools import partial

from django.db import transaction
from django.utils import timezone

from accounts.access import Actor
from accounts.actions import record
from core.errors import Conflict, Forbidden, Invalid, MissingScope, NotFound
from runs import caches, quotas, secrets
from runs.models import Purpose, Run, RunState, Secret
from runs.outcomes import describe
from runs.outputs import clean_artifact_paths
from runs.outputs_up import commit_tree
from runs.tasks import send_prepare
from sandbox import placement
from sandbox.egress import policy as egress_policy
from sandbox.limits import effective_limits, within_bounds
from workspaces import config as workspace_config
from workspaces import contract, reviews
from workspaces.gitstore import MODE_TREE
from workspaces.models import ContractReview, Workspace
from workspaces.store import open_store, pin_commit

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
RESERVED_ENV = {
    "PATH",
    "HOME",
    "USER",
    "HOSTNAME",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "BERTH_EGRESS_WAIT_S",
}


def load_config(workspace: Workspace, commit: str) -> workspace_config.WorkspaceConfig:
    """The workspace.toml of `commit` (defaults when absent); a broken file is an error
    the caller can fix, named by line."""
    with open_store(workspace) as store:
        try:
            mode, sha = store.lookup(commit, workspace_config.FILENAME)
        except NotFound:  # absent: every key is optional
            return workspace_config.WorkspaceConfig()
        if mode == MODE_TREE:
            return workspace_config.WorkspaceConfig()
        text = store.blob(sha).decode("utf-8", "replace")
    return workspace_config.parse(text)


def start_run(
    workspace: Workspace,
    actor: Actor,
    command: str,
    ref: str | None = None,
    timeout_s: int | None = None,
    env: dict[str, str] | None = None,
    runtime: str | None = None,
    secrets: list[str] | None = None,
    commit_changes: bool = False,
) -> Run:
    """Record a run's inputs and queue it.

    1. The ref is resolved to a commit SHA now: the run never follows a moving branch.
    2. Limits, setup, artifacts and network come from that commit's workspace.toml,
       limits clamped to the operator's maxima (warnings on the run); request values
       past a maximum are refused. A gVisor policy overrides any runtime asked for.
    3. Secrets are granted by name, only those the actor may grant.
    4. After commit, the `prepare_run` task (queue `runner`) creates and starts it.
    """
    command = command.strip()
    if not command:
        raise Invalid("Give a command to run.", {"field": "command"})
    if commit_changes:
        _require_ref_writer(actor)
    with open_store(workspace) as store:
        commit = store.resolve(ref or workspace.default_branch)
    config = load_config(workspace, commit)
    limits, warnings = effective_limits(config.sandbox, {"timeout_s": timeout_s})
    chosen, why = policy_runtime(workspace, runtime or config.sandbox.runtime)
    network, ignored = egress_policy.for_run(list(config.egress), workspace.team.egress_ceiling)
    review = reviews.admit(
        workspace,
        actor,
        contract.asked(config, runtime, timeout_s),
        commit=commit,
        ref=ref or workspace.default_branch,
        asked_for=_asked_for("a run", runtime, timeout_s),
    )
    return queue_run(
        workspace,
        actor,
        Run(
            workspace=workspace,
            ref=ref or workspace.default_branch,
            commit=commit,
            contract_review=review,
            command=command,
            image=config.sandbox.image,
            runtime=chosen,
            limits=limits,
            network=network,
            setup={"command": config.setup.command, "cache_key": list(config.setup.cache_key)}
            if config.setup.command
            else {},
            artifact_paths=clean_artifact_paths(config.artifacts),
            commit_changes=commit_changes,
            warnings=warnings + why + ignored,
        ),
        env or {},
        secrets or [],
    )


def rerun(run: Run, actor: Actor, env: dict[str, str] | None = None) -> Run:
    """A new run from exactly the recorded inputs: commit, image id, command, limits,
    runtime, setup, artifacts, env and secret names. Env values are not kept past a
    run's end, so the caller gives them again; secrets are granted again by name."""
    _only_runs(run)
    if run.commit_changes:
        _require_ref_writer(actor)
    env = env or {}
    missing = sorted(set(run.env_names) - set(env))
    extra = sorted(set(env) - set(run.env_names))
    if missing or extra:
        raise Invalid(
            "A replay takes the same env names as the run it repeats: give values "
            f"for {', '.join(missing) or 'none'}"
            + (f" and not {', '.join(extra)}" if extra else "")
            + " (Berth keeps no env values once a run ends).",
            {"field": "env", "missing": missing, "unexpected": extra},
            code="env_values_required",
        )
    chosen, why = policy_runtime(run.workspace, run.runtime)
    limits, bounded = within_bounds(run.limits)
    # The same entries are asked for, but today's ceiling bounds them: a replay never
    # reaches what the team has since taken away.
    requested = list(run.network.get("requested", run.network.get("egress", [])))
    network, ignored = egress_policy.for_run(requested, run.workspace.team.egress_ceiling)
    # The replay asks for what the run had; a review decided since (a rejection, or
    # another contract approved after it) holds it as it would any ask.
    review = reviews.admit(
        run.workspace,
        actor,
        recorded_contract(run, requested),
        commit=run.commit,
        ref=run.ref,
        asked_for=f"a replay of run {run.public_id}",
    )
    return queue_run(
        run.workspace,
        actor,
        Run(
            workspace=run.workspace,
            ref=run.ref,
            commit=run.commit,
            contract_review=review,
            command=run.command,
            image=run.image,
            image_id=run.image_id,
            runtime=chosen,
            limits=limits,
            network=network,
            artifact_paths=run.artifact_paths,
            setup={k: run.setup[k] for k in ("command", "cache_key") if k in run.setup},
            commit_changes=run.commit_changes,
            rerun_of=run,
            warnings=[w for w in run.warnings if not w.startswith("[network]")]
            + bounded
            + why
            + ignored,
        ),
        env,
        list(run.secret_names),
    )


def _asked_for(what: str, runtime: str | None, timeout_s: int | None) -> str:
    """What asked, as a review names it: a request's overrides are part of its ask."""
    overrides = [f"runtime={runtime}"] * bool(runtime) + [f"timeout_s={timeout_s}"] * (
        timeout_s is not None
    )
    return what + (f" with {', '.join(overrides)}" if overrides else "")


def recorded_contract(run: Run, egress: list[str]) -> contract.Values:
    """The contract a recorded run had, as a replay asks for it again (a limit a row
    made before it was recorded takes its default)."""
    defaults = contract.default_values()
    return {
        "image": run.image,
        "runtime": run.runtime,
        **{k: run.limits.get(k, defaults[k]) for k in contract.LIMIT_KEYS},
        "egress": sorted(set(egress)),
    }


def admit_contract(
    workspace: Workspace,
    actor: Actor,
    config: workspace_config.WorkspaceConfig,
    commit: str,
    ref: str,
    what: str,
) -> ContractReview | None:
    """The review a preview's or a release build's contract runs under (no overrides:
    those are the file's), or the typed refusal (workspaces.reviews.admit)."""
    return reviews.admit(
        workspace, actor, contract.asked(config), commit=commit, ref=ref, asked_for=what
    )


def commit_run_changes(run: Run, actor: Actor) -> str:
    """Commit what a finished run changed, afterwards, as it would have been with
    `commit_changes`: one commit on `runs/<id>` from the run's commit. Once only."""
    _only_runs(run)
    _require_ref_writer(actor)
    if run.is_active:
        raise Conflict("The run is still going; its changes are known once it ends.")
    if run.changes_commit:
        raise Conflict(
            f"Already committed as {run.changes_commit[:12]} on {run.changes_branch}.",
            {"sha": run.changes_commit},
            code="already_committed",
        )
    tree = (run.changes or {}).get("tree")
    if not tree:
        raise Conflict(
            "This run changed no files (or its changes were not read back), so "
            "there is nothing to commit.",
            code="no_changes",
        )
    with open_store(run.workspace) as store:
        sha = commit_tree(store, run, tree.encode(), actor)
    run.record_changes_commit(sha)
    return sha


def _require_ref_writer(actor: Actor) -> None:
    """Committing a run's changes writes the branch `runs/<id>`: whatever door asks (a
    run request's `commit_changes`, a rerun that copies it, commit-changes afterwards),
    writing a ref needs `workspace:write`, which the `run` scope alone never grants."""
    try:
        actor.require_scope("workspace:write")
    except MissingScope as e:
        raise MissingScope(
            "Committing a run's changes writes the branch runs/<id>, which needs the "
            "`workspace:write` scope; ask without commit_changes, or use a token that has "
            "it.",
            e.details,
        ) from None


def _only_runs(run: Run) -> None:
    """A preview's, a release's or a build's process is its owner's to stop or repeat."""
    if run.purpose != Purpose.RUN:
        owner = "deploy" if run.purpose == Purpose.BUILD else run.purpose
        raise Conflict(
            f"This is the process of a {owner}; stop or restart the {owner} instead.",
            {"purpose": run.purpose},
            code="not_a_run",
        )


def policy_runtime(workspace: Workspace, asked: str) -> tuple[str, list[str]]:
    """The runtime a run gets: a team or workspace that requires gVisor always gets it
    (workspace.toml and requests cannot lower it), and the run says why."""
    if asked not in ("runc", "gvisor"):
        raise Invalid('runtime must be "runc" or "gvisor".', {"field": "runtime"})
    if asked == "runc" and workspace.requires_gvisor:
        whose = "this workspace" if workspace.require_gvisor else f"team {workspace.team.slug}"
        return "gvisor", [f"runc was asked for, but {whose} requires gVisor, so gvisor applies."]
    return asked, []


def check_env_names(env: dict[str, str]) -> None:
    for name in env:
        if not ENV_NAME.match(name) or name in RESERVED_ENV:
            raise Invalid(
                f"{name!r} cannot be set: use letters, digits and _ (not "
                f"{', '.join(sorted(RESERVED_ENV))}).",
                {"field": "env"},
            )


def check_grants(
    workspace: Workspace, actor: Actor, names: list[str], env: dict[str, str]
) -> list[str]:
    """The secret names an actor may grant (sorted), or the typed refusal."""
    names = sorted(set(names))
    if not names:
        return []
    known = set(
        Secret.objects.filter(workspace=workspace, name__in=names).values_list("name", flat=True)
    )
    unknown = [n for n in names if n not in known]
    if unknown:
        raise Invalid(
            f"No secret {', '.join(unknown)} in this workspace; an admin sets "
            "secrets on the workspace's secrets page.",
            {"field": "secrets", "unknown": unknown},
            code="unknown_secret",
        )
    if actor.token is not None:
        refused = [n for n in names if n not in (actor.token.secret_names or [])]
        if refused:
            raise Forbidden(
                f"This token may not grant {', '.join(refused)} to runs; ask an "
                "admin for a token whose secret list includes "
                f"{'it' if len(refused) == 1 else 'them'}.",
                {"secrets": refused},
                code="secret_not_granted",
            )
    clash = sorted(set(names) & set(env))
    if clash:
        raise Invalid(
            f"{', '.join(clash)} is given both as env and as a secret; pick one.", {"field": "env"}
        )
    return names


def queue_run(
    workspace: Workspace, actor: Actor, run: Run, env: dict[str, str], secret_names: list[str]
) -> Run:
    check_env_names(env)
    run.secret_names = check_grants(workspace, actor, secret_names, env)
    run.env_names = sorted(env)
    # Sealed, not plain: the values wait with the run for admission and are cleared at
    # its end; the names are the record. Sealed for its host once it is placed.
    run.env_sealed = secrets.seal(env) if env else ""
    run.requested_by, run.token = actor.user, actor.token
    if run.setup.get("command"):
        # Read here, on the web host: the runner host keys its cache from these.
        run.setup = {
            **run.setup,
            "key_entries": caches.key_entries_at(
                workspace, run.commit, run.setup.get("cache_key", [])
            ),
        }
    if run.purpose != Purpose.RUN:
        # A preview's quota is its own (previews.actions); a build was approved by a
        # person, and waits for no team's flood. Placed now (or refused, nothing
        # written): pinned where its caller says (a session's volume is there).
        run.runner_host = placement.place(run.runtime, placement.load(), pinned=run.runner_host)
        run.admitted_at = timezone.now()
        run.env_sealed, run.secrets_sealed = secrets.placed(run, run.runner_host)
    with transaction.atomic():
        if run.purpose == Purpose.RUN:
            # Under admission's lock: requests at once cannot all pass the queue limit.
            quotas.lock()
            quotas.check_submission(workspace.team)
            host = quotas.admits_at_once(workspace.team, run.runtime)
            if host:
                run.admitted_at, run.runner_host = timezone.now(), host
                run.env_sealed, run.secrets_sealed = secrets.placed(run, host)
        run.save()
        pin_commit(workspace, run.commit)
        record(
            workspace.team,
            actor,
            "run.rerun" if run.rerun_of_id else "run.started",
            f"run:{run.public_id}",
            workspace.slug,
            command=run.command[:200],
            commit=run.commit,
            runtime=run.runtime,
            secrets=run.secret_names,
            **({"purpose": run.purpose} if run.purpose != Purpose.RUN else {}),
            **({"rerun_of": run.rerun_of.public_id} if run.rerun_of else {}),
        )
        if run.admitted_at is not None:
            # Sent the moment this commits; if the broker is down, the run is accepted
            # all the same and the agent sends it later (runs.tasks.send_prepare).
            transaction.on_commit(partial(send_prepare, run.pk))
        elif run.pk in quotas.admit():
            # Others wait, or no slot was free: admission decides among them, in this
            # transaction, under the lock already held. The answer says admitted.
            run.refresh_from_db(fields=["admitted_at", "runner_host"])
    return run


def cancel_run(run: Run, actor: Actor) -> Run:
    """Stop a run. Queued or preparing ones end at once; running ones are signalled by
    the agent (SIGTERM, then SIGKILL after the grace period)."""
    _only_runs(run)
    if not run.is_active:
        raise Conflict(f"The run already ended ({run.state}).", {"state": run.state})
    state, message = describe("cancelled_by_user", who=actor.label)
    with transaction.atomic():
        run.ask_to_stop("cancelled_by_user", actor.label)
        if run.state in (RunState.QUEUED, RunState.PREPARING):
            run.finish(state, "cancelled_by_user", message)
        record(
            run.workspace.team, actor, "run.cancelled", f"run:{run.public_id}", run.workspace.slug
        )
    return run
