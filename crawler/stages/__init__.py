"""The four stages as plain functions, one module each. Celery tasks (``crawler.celeryapp.tasks``) only
decode messages (``crawler.stages.messages``), call these and send what they return on; tests call
these directly, with a ``Context`` built from whatever parts they need.

Each stage is idempotent, because with acks_late any of them may run twice:
fetch skips URLs whose lease it no longer holds, dedup admits each link batch once (by token),
store skips records whose fetch id is already stored, and leases end once.
"""

from crawler.stages.context import Context, read_message, refuse
from crawler.stages.dedup import dedup_stage, refill_stage
from crawler.stages.fetch import BODY_TTL, fetch_config, fetch_stage
from crawler.stages.parse import RENDERED, link_token, parse_stage
from crawler.stages.render import render_stage
from crawler.stages.render import wanted as render_wanted
from crawler.stages.store import hold_for_retry, plan_visit, store_stage, to_record

__all__ = [
           "BODY_TTL",
           "RENDERED",
           "Context",
           "dedup_stage",
           "fetch_config",
           "fetch_stage",
           "hold_for_retry",
           "link_token",
           "parse_stage",
           "plan_visit",
           "read_message",
           "refill_stage",
           "refuse",
           "render_stage",
           "render_wanted",
           "store_stage",
           "to_record",
]
