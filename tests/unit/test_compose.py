"""docker-compose.yml against the real CLI and settings: a typo in a command or a variable fails
here, not on the day someone runs ``make up``."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from celery.bin.celery import celery as celery_cli

from crawler.config.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
_VAR = re.compile(r"\$\{(\w+)(?:(:-|:\?)([^}]*))?\}")
SECRETS = {"REDIS_PASSWORD", "POSTGRES_PASSWORD", "FLOWER_PASSWORD", "CONSOLE_PASSWORD", "SESSION_KEY"}
# The console's credentials (crawler.web.auth), not crawl settings.
WEB_AUTH = {"CRAWLER_WEB_USER", "CRAWLER_WEB_PASSWORD", "CRAWLER_WEB_TOKEN"}
# Secrets a worker reads from its environment that are not settings (crawler.config.secretbox).
WORKER_SECRETS = {"CRAWLER_SECRET_KEY"}


class MissingSecret(Exception):
    pass


def _interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's interpolation: ${VAR}, ${VAR:-default}, ${VAR:?message} (an error when VAR is
    unset or empty), $$ for a dollar sign."""
    def one(m: re.Match[str]) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3)
        if env.get(name):
            return env[name]
        if op == ":?":
            raise MissingSecret(f"required variable {name} is missing a value: {arg}")
        return arg or ""
    return _VAR.sub(one, value).replace("$$", "$")


_TEST_SECRETS = {name: f"test-{name.lower()}" for name in SECRETS}


def _subst(value: str) -> str:
    """A value as compose would see it with every secret given."""
    return _interpolate(value, _TEST_SECRETS)


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


def _command(service: dict[str, Any]) -> list[str]:
    return [_subst(str(a)) for a in service.get("command", [])]


def _parse_celery(argv: list[str]) -> tuple[str, click.Context]:
    """Parse a ``celery ...`` command line with Celery's own click commands."""
    assert argv[0] == "celery", argv
    from celery.bin.base import CLIContext

    from crawler import app

    ctx = celery_cli.make_context("celery", argv[1:], obj=CLIContext(app=app, no_color=True, workdir=str(ROOT)))
    # click 8 keeps the subcommand apart from its arguments; click 9 will not.
    name, *rest = [*getattr(ctx, "_protected_args", []), *ctx.args]
    sub = celery_cli.get_command(ctx, name)
    assert sub is not None, f"celery has no command {name!r}"
    return name, sub.make_context(name, rest, parent=ctx)


def test_every_celery_command_parses_and_names_our_app(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        argv = _command(service)
        if not argv or argv[0] != "celery":
            continue
        assert argv[1:3] == ["-A", "crawler"], f"{name}: not our app"
        sub, ctx = _parse_celery(argv)
        if sub == "flower":
            from flower.options import options

            # Flower hands its options to tornado: unknown ones raise there.
            options.parse_command_line(["flower", *ctx.params.get("tornado_argv", ())], final=False)
            assert options.max_tasks == 10000 and options.basic_auth, f"{name}: unbounded or open Flower"


def test_the_console_parses_listens_behind_auth_and_is_published_on_loopback(compose: dict[str, Any]) -> None:
    from crawler.cli import build_parser
    from crawler.errors import ConfigError
    from crawler.web.server import listen_auth

    console = compose["services"]["console"]
    argv = _command(console)
    assert argv[:2] == ["crawler", "web"]
    args = build_parser().parse_args(argv[1:])
    assert args.func.__name__ == "cmd_web" and (args.host, args.port) == ("0.0.0.0", 8089)
    env = {k: _subst(str(v)) for k, v in console["environment"].items()}
    assert env["CRAWLER_REDIS_URL"] == _subst(compose["x-crawler"]["environment"]["CRAWLER_REDIS_URL"])
    with pytest.MonkeyPatch.context() as mp:
        for name in WEB_AUTH:
            mp.delenv(name, raising=False)
        with pytest.raises(ConfigError, match="not only on loopback"):
            listen_auth(args.host)
        for name in WEB_AUTH & set(env):
            mp.setenv(name, env[name])
        auth = listen_auth(args.host)
    assert auth is not None and auth.user == "admin" and auth.password == _TEST_SECRETS["CONSOLE_PASSWORD"]
    assert console["ports"] == [f"127.0.0.1:{args.port}:{args.port}"]
    assert compose["services"]["flower"]["ports"][0].startswith("127.0.0.1:")


def test_workers_cover_every_shard_and_settings_are_real(compose: dict[str, Any]) -> None:
    services = compose["services"]
    known = {f"CRAWLER_{name.upper()}" for name in Settings.__dataclass_fields__}
    shards: set[int] = set()
    want = None
    for name, service in services.items():
        env = {k: _subst(str(v)) for k, v in (service.get("environment") or {}).items()}
        crawler_env = {k: v for k, v in env.items()
                       if k.startswith("CRAWLER_") and k not in WEB_AUTH | WORKER_SECRETS}
        assert set(crawler_env) <= known, f"{name}: unknown settings {set(crawler_env) - known}"
        if crawler_env:
            settings = Settings.from_env(crawler_env)  # values must parse and validate
            want = settings.shards
        argv = _command(service)
        if argv[:4] == ["celery", "-A", "crawler", "worker"]:
            _, ctx = _parse_celery(argv)
            for queue in ctx.params["queues"]:
                assert re.fullmatch(r"shard-\d+|render", queue), f"{name}: queue {queue!r}"
                if queue != "render":
                    shards.add(int(queue.split("-")[1]))
    assert want is not None and shards == set(range(want)), f"shards served {shards}, settings say {want}"


def test_redis_persists_and_needs_a_password_and_make_runs_compose(compose: dict[str, Any]) -> None:
    redis_cmd = _command(compose["services"]["redis"])
    assert "--appendonly" in redis_cmd and redis_cmd[redis_cmd.index("--appendonly") + 1] == "yes"
    assert "--requirepass" in redis_cmd
    url = _subst(compose["x-crawler"]["environment"]["CRAWLER_REDIS_URL"])
    assert re.match(r"redis://:[^@]+@redis:6379/", url)
    assert "beat" in compose["services"] and "flower" in compose["services"]
    makefile = (ROOT / "Makefile").read_text()
    assert re.search(r"^up:\n\tdocker compose up", makefile, re.M)
    assert re.search(r"^down:\n\tdocker compose down", makefile, re.M)


def test_docker_compose_config_accepts_the_file() -> None:
    docker = shutil.which("docker")
    if not docker or subprocess.run([docker, "compose", "version"], capture_output=True).returncode != 0:
        pytest.skip("no docker compose client here; the parse checks above still ran")
    out = subprocess.run([docker, "compose", "config", "-q"], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr


def _strings(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [s for v in node.values() for s in _strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in _strings(v)]
    return [node] if isinstance(node, str) else []


def test_every_secret_is_required_with_a_message(compose: dict[str, Any]) -> None:
    text = (ROOT / "docker-compose.yml").read_text()
    assert "change-me" not in text
    uses = [m for s in _strings(compose) for m in _VAR.finditer(s) if m.group(1) in SECRETS]
    assert {m.group(1) for m in uses} == SECRETS
    for m in uses:
        assert m.group(2) == ":?" and m.group(1) in m.group(3), f"{m.group(0)}: no default allowed, and say which"


@pytest.mark.parametrize("missing", sorted(SECRETS))
def test_compose_stops_naming_the_missing_secret(compose: dict[str, Any], missing: str) -> None:
    env = {k: v for k, v in _TEST_SECRETS.items() if k != missing}
    with pytest.raises(MissingSecret, match=rf"^required variable {missing} is missing a value: set {missing} "):
        for s in _strings(compose):
            _interpolate(s, env)


def test_workers_get_no_store_password_from_jobs_and_a_confined_store(compose: dict[str, Any]) -> None:
    env = {k: _subst(str(v)) for k, v in compose["x-crawler"]["environment"].items()}
    from crawler.config.redact import has_password

    assert not has_password(env["CRAWLER_STORE"])  # the password comes from PGPASSWORD
    assert env["PGPASSWORD"] == _TEST_SECRETS["POSTGRES_PASSWORD"]
    settings = Settings.from_env({k: v for k, v in env.items() if k.startswith("CRAWLER_") and k not in WORKER_SECRETS})
    assert env["CRAWLER_SECRET_KEY"] == _TEST_SECRETS["SESSION_KEY"]
    assert settings.store_root == "/data" and settings.store_hosts == ["postgres"]
    assert "/data" in [v.split(":")[1] for v in compose["x-crawler"]["volumes"]]
