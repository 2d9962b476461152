"""Runs other rooms own: a preview's or a release's server (a service, with no
wall-clock timeout and no outputs) and a release build; and asking a service to stop."""

from accounts.access import Actor
from runs.actions import load_config, policy_runtime, queue_run
from runs.models import Purpose, Run, RunState
from runs.outcomes import describe
from sandbox.egress import policy as egress_policy
from sandbox.limits import effective_limits
from workspaces.models import ContractReview, Workspace


def start_service(
    workspace: Workspace,
    actor: Actor,
    commit: str,
    ref: str,
    command: str,
    purpose: str,
    image: str | None = None,
    contract_review: ContractReview | None = None,
    runtime: str | None = None,
    workspace_volume: str = "",
    host: str = "",
) -> Run:
    """A long-lived server for another app (a preview, a release, a session's exec
    channel): a run of `purpose`
    with the same contract as any run — image, limits, runtime policy, setup step and
    cache from the commit's workspace.toml — but no wall-clock timeout and no outputs.
    A release runs its own built `image`, with its setup already inside: none here.
    A session asks for its `runtime` (its contract review admitted it) and keeps its
    /workspace in `workspace_volume`, on its `host`. The owner records its own Activity;
    this records the run's."""
    config = load_config(workspace, commit)
    limits, warnings = effective_limits(config.sandbox, {})
    chosen, why = policy_runtime(workspace, runtime or config.sandbox.runtime)
    network, ignored = egress_policy.for_run(list(config.egress), workspace.team.egress_ceiling)
    setup = (
        {"command": config.setup.command, "cache_key": list(config.setup.cache_key)}
        if config.setup.command and image is None
        else {}
    )
    return queue_run(
        workspace,
        actor,
        Run(
            workspace=workspace,
            purpose=purpose,
            ref=ref,
            commit=commit,
            contract_review=contract_review,
            command=command,
            image=image or config.sandbox.image,
            runtime=chosen,
            workspace_volume=workspace_volume,
            runner_host=host,
            limits=limits,
            network=network,
            setup=setup,
            warnings=warnings + why + ignored,
        ),
        {},
        [],
    )


def start_build(
    workspace: Workspace,
    actor: Actor,
    commit: str,
    ref: str,
    output_image: str,
    labels: dict[str, str] | None = None,
    contract_review: ContractReview | None = None,
) -> Run:
    """A release build: `[setup]` then `[deploy] build` of the commit, run in /app of a
    writable root layer (no volumes: a commit of the container keeps only that layer),
    with the workspace's limits, runtime policy and egress. When it succeeds the agent
    commits the container to `output_image` before writing its end."""
    config = load_config(workspace, commit)
    limits, warnings = effective_limits(config.sandbox, {})
    chosen, why = policy_runtime(workspace, config.sandbox.runtime)
    network, ignored = egress_policy.for_run(list(config.egress), workspace.team.egress_ceiling)
    steps = [c for c in (config.setup.command, config.deploy.build) if c.strip()]
    return queue_run(
        workspace,
        actor,
        Run(
            workspace=workspace,
            purpose=Purpose.BUILD,
            ref=ref,
            commit=commit,
            contract_review=contract_review,
            command=" && ".join(f"({c})" for c in steps) or "true",
            image=config.sandbox.image,
            runtime=chosen,
            limits=limits,
            network=network,
            output_image=output_image,
            output_labels=labels or {},
            warnings=warnings + why + ignored,
        ),
        {},
        [],
    )


def stop_service(run: Run, reason: str, who: str) -> None:
    """Ask for a service run's end: queued or preparing ones end at once, running ones
    are signalled by the agent (SIGTERM, then SIGKILL after the grace period)."""
    run.ask_to_stop(reason, who)
    if run.state in (RunState.QUEUED, RunState.PREPARING):
        state, message = describe(reason, who=who)
        run.finish(state, reason, message)
