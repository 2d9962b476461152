"""Workspace secrets through the API."""

API = "/api/v1/workspaces/notes/secrets"
VALUE = "sk-live-4f9a2c7e1b"


def put(client, headers, name: str, body: dict):
    return client.put(f"{API}/{name}", body, content_type="application/json", **headers)
