"""The OpenAPI 3.1 document, made from the endpoint table the routes are made from."""

from __future__ import annotations

import re
from typing import Any

from crawler.web.api import ENDPOINTS

_ERROR = {"description": "one line saying what is wrong",
          "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}


def document(version: str) -> dict[str, Any]:
    paths: dict[str, dict[str, Any]] = {}
    for e in ENDPOINTS:
        op: dict[str, Any] = {
            "summary": e.summary,
            "operationId": e.method.lower() + "_" + re.sub(r"[^a-z0-9]+", "_", e.path.lower()).strip("_"),
            "responses": {str(e.status): {"description": "OK", "content": {"application/json": {"schema": e.result}}},
                          "400": _ERROR, "401": _ERROR, "403": _ERROR, "404": _ERROR, "421": _ERROR},
        }
        if e.params:
            op["parameters"] = [{"name": p.name, "in": p.where, "required": p.where == "path",
                                 "description": p.doc, "schema": {"type": p.kind}} for p in e.params]
        if e.operation in ("pause", "resume"):
            op["responses"]["409"] = _ERROR  # the job is not in a state it applies to
        if e.body is not None:
            op["requestBody"] = {"required": True, "content": {"application/json": {"schema": e.body}}}
            op["responses"]["413"] = _ERROR
        paths.setdefault(e.path, {})[e.method.lower()] = op
    paths["/api/jobs/{job}/events"] = {"get": {
        "summary": "Server-sent events: 'status' (the job's status) every 2 s and 'log' for each new log entry",
        "operationId": "get_api_jobs_job_events",
        "parameters": [{"name": "job", "in": "path", "required": True, "schema": {"type": "string"}},
                       {"name": "max", "in": "query", "required": False, "schema": {"type": "integer"},
                        "description": "close the stream after this many status events (default: never)"}],
        "responses": {"200": {"description": "an event stream", "content": {"text/event-stream": {
            "schema": {"type": "string"}}}}, "404": _ERROR}}}
    paths["/metrics"] = {"get": {
        "summary": "Prometheus text exposition: pages, errors by reason, queue depths, in flight, per node",
        "operationId": "get_metrics",
        "responses": {"200": {"description": "metrics", "content": {"text/plain": {"schema": {"type": "string"}}}}}}}
    return {
        "openapi": "3.1.0",
        "info": {"title": "crawler console API", "version": version,
                 "description": "Steer crawls: the functions the crawler command line calls. State-changing "
                                "calls need Content-Type: application/json and a same-origin request. "
                                "A Host the console does not serve gets 421 (CRAWLER_WEB_ALLOWED_HOSTS); "
                                "a request body over 1 MiB gets 413."},
        "paths": paths,
        "components": {
            "schemas": {"Error": {"type": "object", "required": ["error"],
                                  "properties": {"error": {"type": "string"}}}},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"},
                                "basic": {"type": "http", "scheme": "basic"}},
        },
        "security": [{"bearer": []}, {"basic": []}, {}],
    }
