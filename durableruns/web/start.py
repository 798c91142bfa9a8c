"""Start a run from the dashboard (operators and admins): pick an agent registered in
this process, give its input as JSON (its input schema shown when it declares one).

Refused input (not JSON, not an object, too large, not fitting the schema, an id
already taken) is a 400 with the reason beside the field, the text kept as typed,
and nothing stored. A started run is audited (services.runs.start)."""

from __future__ import annotations

import json

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from .. import roles
from ..engine import registry
from ..engine.errors import DurableRunsError
from ..engine.runs import check_input_text
from ..services import runs as operations

TEMPLATE = "durableruns/run_start.html"


def _agents() -> list[registry.Agent]:
    """The newest version of each agent this process has registered."""
    newest: dict[str, registry.Agent] = {}
    for agent in registry.agents():  # sorted by name, then version (oldest first)
        newest[agent.name] = agent
    return list(newest.values())


def _schemas(agents: list[registry.Agent]) -> dict[str, str]:
    return {
        a.name: json.dumps(a.input_schema, indent=2, ensure_ascii=False)
        for a in agents
        if a.input_schema is not None
    }


@require_http_methods(["GET", "POST"])
@roles.permission_required(roles.OPERATE_RUNS)
def start_run(request: HttpRequest) -> HttpResponse:
    agents = _agents()
    chosen = (request.POST or request.GET).get("agent", "")[:100]
    text = request.POST.get("input", "{}") if request.method == "POST" else "{}"
    run_id = request.POST.get("run_id", "").strip()[:64]
    if request.method == "POST":
        try:
            # Text over the form limit or with a NUL never gets here (validation.py).
            run, _ = operations.start(
                chosen, check_input_text(text), user=request.user, run_id=run_id or None
            )
        except DurableRunsError as exc:
            return _form(request, agents, chosen, text, run_id, str(exc), status=400)
        return redirect(run.get_absolute_url())
    return _form(request, agents, chosen, text, run_id, "")


def _form(
    request: HttpRequest,
    agents: list[registry.Agent],
    chosen: str,
    text: str,
    run_id: str,
    error: str,
    *,
    status: int = 200,
) -> HttpResponse:
    context = {
        "agents": agents,
        "chosen": chosen or (agents[0].name if agents else ""),
        "schemas": _schemas(agents),
        "input_text": text,
        "run_id": run_id,
        "error": error,
    }
    return render(request, TEMPLATE, context, status=status)
