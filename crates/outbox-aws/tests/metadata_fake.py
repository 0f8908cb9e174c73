"""A stand-in for the container credentials endpoint and the EC2 instance
metadata service, for tests/reference.rs: neither exists off AWS, so this
checks the shape of the forwarder's requests and answers as they do.

    metadata_fake.py AUTHORIZATION

listens on a free loopback port, prints it on the first line of stdout,
and serves until its stdin closes:

- GET /container/credentials: a container endpoint, answering only a
  request whose Authorization header is AUTHORIZATION (else 401 with ECS's
  JSON error).
- PUT /latest/api/token, then GET /latest/meta-data/iam/security-
  credentials/ and .../outbox-role: IMDSv2 with the instance profile
  outbox-role. The token request needs X-aws-ec2-metadata-token-ttl-seconds
  (1 to 21600), every GET the session token it gave (else 401, as IMDS
  refuses IMDSv1 when IMDSv2 is required).
- The same under /no-profile: an instance without an instance profile
  (404 for the role's name).
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SESSION_TOKEN = "imds-session-token-AQAEAEx"
ROLE = "outbox-role"
ROLE_PATH = "/latest/meta-data/iam/security-credentials/"


def credentials(prefix, with_code):
    body = {
        "AccessKeyId": f"ASIA{prefix}EXAMPLE",
        "SecretAccessKey": f"{prefix.lower()}/secret+key=",
        "Token": f"{prefix.lower()}-session-token/+=",
        "Expiration": "2099-01-01T00:00:00Z",
    }
    if with_code:
        body.update(
            {"Code": "Success", "LastUpdated": "2026-01-01T00:00:00Z",
             "Type": "AWS-HMAC"}
        )
    return body


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def reply(self, status, body, content_type="application/json"):
        data = body if isinstance(body, bytes) else body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self):
        path = self.path.removeprefix("/no-profile")
        if path != "/latest/api/token":
            return self.reply(404, "", "text/plain")
        ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds", "")
        if not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
            return self.reply(400, "", "text/plain")
        self.reply(200, SESSION_TOKEN, "text/plain")

    def do_GET(self):
        if self.path == "/container/credentials":
            if self.headers.get("Authorization") != self.server.authorization:
                return self.reply(401, json.dumps(
                    {"code": "InvalidToken", "message": "bad authorization"}))
            return self.reply(200, json.dumps(credentials("CONTAINER", False)))
        no_profile = self.path.startswith("/no-profile/")
        path = self.path.removeprefix("/no-profile")
        if not path.startswith("/latest/"):
            return self.reply(404, "", "text/plain")
        if self.headers.get("X-aws-ec2-metadata-token") != SESSION_TOKEN:
            return self.reply(401, "", "text/plain")
        if path == ROLE_PATH:
            if no_profile:
                return self.reply(404, "", "text/plain")
            return self.reply(200, ROLE + "\n", "text/plain")
        if path == ROLE_PATH + ROLE and not no_profile:
            return self.reply(200, json.dumps(credentials("INSTANCE", True)))
        self.reply(404, "", "text/plain")

    def log_message(self, format, *args):
        pass


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.authorization = sys.argv[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(server.server_address[1], flush=True)
    # Serves until the test closes stdin, or ends without closing it.
    sys.stdin.read()
    server.shutdown()


if __name__ == "__main__":
    main()
