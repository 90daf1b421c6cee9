"""``crawler web``: serve the console with uvicorn, refusing an exposed address without auth."""

from __future__ import annotations

import uvicorn
from redis import Redis

from crawler.web.app import create_app
from crawler.web.auth import Auth, Hosts, allowed_hosts, allowed_origins, check_listen


def listen_auth(host: str) -> Auth | None:
    """The environment's credentials; ConfigError (one line) if ``host`` is not loopback and it
    gives none, or ``CRAWLER_WEB_ALLOWED_HOSTS`` names something that is no host. Checked before
    anything connects or listens."""
    auth = Auth.from_env()
    check_listen([host], auth)
    Hosts.serving(None, allowed_hosts())
    return auth


def serve(client: Redis, auth: Auth | None, host: str = "127.0.0.1", port: int = 8089) -> None:
    """Run until interrupted."""
    # uvicorn's access log would print every 2 s poll of every open console: warnings only.
    app = create_app(client, auth, origins=allowed_origins(), listen=host, allowed_hosts=allowed_hosts())
    uvicorn.run(app, host=host, port=port, log_level="warning", server_header=False, proxy_headers=False)
