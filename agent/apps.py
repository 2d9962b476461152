from django.apps import AppConfig


class AgentConfig(AppConfig):
    """The runner agent process (manage.py runner_agent): a composition root above the
    apps, wiring the engine loop to what runs, previews and deploys do at each event."""

    name = "agent"
