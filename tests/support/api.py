"""Helpers for the JSON API: a token's header and the one error shape."""


def bearer(secret: str) -> dict[str, str]:
    return {"HTTP_AUTHORIZATION": f"Bearer {secret}"}


def assert_error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert set(body) == {"error"}
    assert body["error"]["code"] == code
    assert body["error"]["message"]
    assert isinstance(body["error"]["details"], dict)
    return body["error"]


class Api:
    """The JSON API with a token, as an agent calls it."""

    def __init__(self, client, secret: str) -> None:
        self.client, self.headers = client, bearer(secret)

    def get(self, path: str, **kw):
        return self.client.get(f"/api/v1{path}", **self.headers, **kw)

    def post(self, path: str, body):
        return self.client.post(
            f"/api/v1{path}", body, content_type="application/json", **self.headers
        )

    def put(self, path: str, body):
        return self.client.put(
            f"/api/v1{path}", body, content_type="application/json", **self.headers
        )

    def delete(self, path: str):
        return self.client.delete(f"/api/v1{path}", **self.headers)
