"""Egress as a sandbox sees it: a host-local file server, a policy, a run's output."""

import http.server

from tests.support.runs import set_toml


class Files(http.server.BaseHTTPRequestHandler):
    """files.test as a sandbox reaches it: /big/<bytes> streams that many, anything else
    answers with the Host and Proxy-Authorization it was sent."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.path.startswith("/big/"):
            size = int(self.path.rsplit("/", 1)[1])
            self.send_response(200)
            self.send_header("Content-Length", str(size))
            self.end_headers()
            chunk = b"x" * 65536
            with_left = size
            try:
                while with_left > 0:
                    self.wfile.write(chunk[: min(len(chunk), with_left)])
                    with_left -= len(chunk)
            except OSError:
                pass  # the proxy cut it: what a cap test expects
            return
        body = b"hello through the proxy\n"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("X-Seen-Host", self.headers.get("Host", ""))
        self.send_header(
            "X-Seen-Proxy-Authorization", self.headers.get("Proxy-Authorization", "none")
        )
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def policy(
    shop, cast, egress: list[str], runtime: str = "runc", ceiling: list[str] | None = None
) -> None:
    team = cast.team_a
    team.egress_ceiling = egress if ceiling is None else ceiling
    team.save()
    entries = ", ".join(f'"{e}"' for e in egress)
    set_toml(shop, cast, f'[sandbox]\nruntime = "{runtime}"\n\n[network]\negress = [{entries}]\n')


def run(agent, command: str) -> tuple[dict, str]:
    done = agent.wait(agent.run(command))
    return done, "\n".join(agent.output(done))
