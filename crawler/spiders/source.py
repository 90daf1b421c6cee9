"""Reading a spider's or pipeline's source with ``ast``, never running it: what a module binds
and what a class body assigns. The submitter and the console learn a spider's facts this way, so
code named by an API caller is never imported where it is submitted."""

from __future__ import annotations

import ast


def top_level(body: list[ast.stmt]) -> list[ast.stmt]:
    """What a module binds as it runs: its statements, and those inside if / try / with blocks."""
    out: list[ast.stmt] = []
    for node in body:
        out.append(node)
        if isinstance(node, (ast.If, ast.With)):
            out += top_level(node.body) + top_level(getattr(node, "orelse", []))
        elif isinstance(node, ast.Try):
            out += top_level(node.body) + top_level(node.orelse) + top_level(node.finalbody)
            for handler in node.handlers:
                out += top_level(handler.body)
    return out


def bound_names(body: list[ast.stmt]) -> set[str]:
    """The names a module's statements bind: classes, functions, assignments and imports."""
    bound: set[str] = set()
    for node in top_level(body):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            bound.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update(a.asname or a.name.split(".")[0] for a in node.names)
    return bound


def assigned(stmt: ast.stmt) -> tuple[str, ast.expr | None]:
    """``(name, value)`` for a plain ``name = value`` or ``name: T = value``; ``("", None)``
    for anything else."""
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id, stmt.value
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        return stmt.target.id, stmt.value
    return "", None
