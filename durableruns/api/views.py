"""API views. Each checks the same permission as the matching page (durableruns.roles);
authentication (token or session) is DRF's, so anonymous requests get 401.

The views are exempt from LoginRequiredMiddleware, which only knows session logins:
DRF authenticates the request itself, and token clients have no session.
"""

from __future__ import annotations

from typing import Any

from django.contrib.auth.decorators import login_not_required
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import status as http
from rest_framework.decorators import api_view, permission_classes
from rest_framework.exceptions import NotFound, PermissionDenied, ValidationError
from rest_framework.pagination import CursorPagination
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response

from .. import roles, validation
from ..engine import replay
from ..engine.errors import DurableRunsError
from ..engine.runs import RUN_ID_PATTERN, RunConflict
from ..models import Approval, AuditEvent, Effect, Run
from ..services import approvals, escalations
from ..services import langgraph as langgraph_service
from ..services import runs as runs_service
from . import serializers as s

DENIED = {
    401: OpenApiResponse(s.ErrorSerializer, "not authenticated"),
    403: OpenApiResponse(s.ErrorSerializer, "authenticated, without the permission"),
}
MISSING = {404: OpenApiResponse(s.ErrorSerializer, "no such run or effect")}
INVALID = {400: OpenApiResponse(description="invalid request: field errors or detail")}
CONFLICT = {409: OpenApiResponse(s.ErrorSerializer, "the run is not in a state for this")}


def _require(request: Request, perm: str) -> None:
    if not roles.has(request.user, perm):
        raise PermissionDenied(f"needs {perm}")


class _Cursor(CursorPagination):
    page_size = 50
    page_size_query_param = "limit"
    max_page_size = 200

    def decode_cursor(self, request: Request) -> Any:
        # DRF answers a bad cursor with 404; it is a bad request parameter. Its position
        # is compared with the ordering column as is, so it must be of that column's type.
        try:
            cursor = super().decode_cursor(request)
        except NotFound:
            raise ValidationError({"cursor": "invalid cursor"}) from None
        if cursor is not None and cursor.position is not None:
            field = self.ordering[0].lstrip("-")
            try:
                if field.endswith("_at"):
                    validation.moment(cursor.position, "cursor")
                else:
                    validation.integer(cursor.position, "cursor", maximum=2**62)
            except validation.InvalidInput:
                raise ValidationError({"cursor": "invalid cursor"}) from None
        return cursor


class RunCursor(_Cursor):
    ordering = ("-created_at", "-id")


class StepCursor(_Cursor):
    ordering = ("position",)


class EffectCursor(_Cursor):
    ordering = ("id",)


class ApprovalCursor(_Cursor):
    ordering = ("id",)


def _page(
    request: Request,
    queryset: Any,
    cursor: type[_Cursor],
    serializer: type[s.serializers.Serializer],
) -> Response:
    paginator = cursor()
    rows = paginator.paginate_queryset(queryset, request)
    data = serializer(rows, many=True, context={"request": request}).data
    return paginator.get_paginated_response(data)


def _choice(request: Request, name: str, choices: Any) -> str | None:
    value = request.query_params.get(name)
    if value is not None and value not in choices.values:
        raise ValidationError({name: f"must be one of {sorted(choices.values)}"})
    return value


def _page_params(*extra: OpenApiParameter) -> list[OpenApiParameter]:
    return [
        OpenApiParameter("cursor", OpenApiTypes.STR, description="from a next/previous link"),
        OpenApiParameter("limit", OpenApiTypes.INT, description="page size, at most 200"),
        *extra,
    ]


# --- Runs ----------------------------------------------------------------------------


@login_not_required
@extend_schema(
    methods=["GET"],
    operation_id="runs_list",
    responses={200: s.RunPage, **DENIED, **INVALID},
    parameters=_page_params(
        OpenApiParameter("status", OpenApiTypes.STR, enum=Run.Status.values),
        OpenApiParameter("agent", OpenApiTypes.STR),
        OpenApiParameter("parent", OpenApiTypes.STR, description="a run id: only its child runs"),
    ),
    description="Runs, newest first, with keyset (cursor) pagination.",
)
@extend_schema(
    methods=["POST"],
    operation_id="runs_start",
    request=s.StartRunSerializer,
    responses={201: s.RunSerializer, 200: s.RunSerializer, **DENIED, **INVALID, **CONFLICT},
    description="Start a run. Idempotent on `run_id`: repeating the request returns the "
    "same run (200); the same id with another agent or input is a 409.",
)
@api_view(["GET", "POST"])
def runs(request: Request) -> Response:
    if request.method == "POST":
        return _start(request)
    _require(request, roles.VIEW_RUNS)
    queryset = Run.objects.select_related("created_by")
    if state := _choice(request, "status", Run.Status):
        queryset = queryset.filter(status=state)
    if agent := request.query_params.get("agent"):
        queryset = queryset.filter(agent=agent)
    if (parent := request.query_params.get("parent")) is not None:
        if not RUN_ID_PATTERN.match(parent):
            raise ValidationError({"parent": "must be a run id (1-64 letters, digits, . _ -)"})
        queryset = queryset.filter(parent_run_id=parent)
    return _page(request, queryset, RunCursor, s.RunSerializer)


def _start(request: Request) -> Response:
    _require(request, roles.OPERATE_RUNS)
    form = s.StartRunSerializer(data=request.data)
    form.is_valid(raise_exception=True)
    data = form.validated_data
    try:
        run, created = runs_service.start(
            data["agent"],
            data["input"],
            run_id=data.get("run_id"),
            user=request.user,
            version=data.get("agent_version"),
        )
    except RunConflict as exc:
        return Response({"detail": str(exc)}, status=http.HTTP_409_CONFLICT)
    except DurableRunsError as exc:
        return Response({"detail": str(exc)}, status=http.HTTP_400_BAD_REQUEST)
    return Response(
        s.RunSerializer(run, context={"request": request}).data,
        status=http.HTTP_201_CREATED if created else http.HTTP_200_OK,
    )


@login_not_required
@extend_schema(responses={200: s.RunSerializer, **DENIED, **MISSING})
@api_view(["GET"])
def run_detail(request: Request, run_id: str) -> Response:
    _require(request, roles.VIEW_RUNS)
    run = get_object_or_404(Run.objects.select_related("created_by"), pk=run_id)
    return Response(s.RunSerializer(run, context={"request": request}).data)


@login_not_required
@extend_schema(
    operation_id="runs_steps_list",
    responses={200: s.StepPage, **DENIED, **MISSING, **INVALID},
    parameters=_page_params(),
)
@api_view(["GET"])
def run_steps(request: Request, run_id: str) -> Response:
    _require(request, roles.VIEW_RUNS)
    run = get_object_or_404(Run, pk=run_id)
    return _page(request, run.steps.all(), StepCursor, s.StepSerializer)


@login_not_required
@extend_schema(
    operation_id="runs_effects_list",
    responses={200: s.EffectPage, **DENIED, **MISSING, **INVALID},
    parameters=_page_params(),
)
@api_view(["GET"])
def run_effects(request: Request, run_id: str) -> Response:
    _require(request, roles.VIEW_RUNS)
    run = get_object_or_404(Run, pk=run_id)
    return _page(
        request, run.effects.select_related("resolved_by"), EffectCursor, s.EffectSerializer
    )


@login_not_required
@extend_schema(
    operation_id="runs_approvals_list",
    responses={200: s.ApprovalPage, **DENIED, **MISSING, **INVALID},
    parameters=_page_params(),
)
@api_view(["GET"])
def run_approvals(request: Request, run_id: str) -> Response:
    _require(request, roles.VIEW_RUNS)
    run = get_object_or_404(Run, pk=run_id)
    return _page(request, run.approvals.all(), ApprovalCursor, s.ApprovalSerializer)


@login_not_required
@extend_schema(
    operation_id="runs_audit_list",
    responses={200: s.AuditEventSerializer(many=True), **DENIED, **MISSING},
    description="Actions on the run, its approvals and its effects, oldest first.",
)
@api_view(["GET"])
def run_audit(request: Request, run_id: str) -> Response:
    _require(request, roles.VIEW_RUNS)
    run = get_object_or_404(Run, pk=run_id)
    events = AuditEvent.objects.for_run(run)
    return Response(s.AuditEventSerializer(events, many=True).data)


# --- Operator actions ------------------------------------------------------------------


def _operated(request: Request, run_id: str) -> Run:
    _require(request, roles.OPERATE_RUNS)
    return get_object_or_404(Run.objects.select_related("created_by"), pk=run_id)


def _action_result(
    request: Request, run: Run, done: bool, reached: tuple[str, ...], what: str
) -> Response:
    run.refresh_from_db()
    if not done and run.status not in reached:
        return Response(
            {"detail": f"run {run.id} is {run.status}; it cannot be {what}"},
            status=http.HTTP_409_CONFLICT,
        )
    return Response(s.RunSerializer(run, context={"request": request}).data)


@login_not_required
@extend_schema(
    request=s.CancelSerializer,
    responses={200: s.RunSerializer, **DENIED, **MISSING, **INVALID, **CONFLICT},
    description="Cancel a run that has not finished, saying why (audited); repeating it "
    "is harmless.",
)
@api_view(["POST"])
def run_cancel(request: Request, run_id: str) -> Response:
    run = _operated(request, run_id)
    form = s.CancelSerializer(data=request.data)
    form.is_valid(raise_exception=True)
    try:
        reason = runs_service.person_reason(form.validated_data["reason"])
    except runs_service.ReasonRequired as exc:
        raise ValidationError({"reason": str(exc)}) from None
    done = runs_service.cancel(run, user=request.user, reason=reason)
    return _action_result(request, run, done, (Run.Status.CANCELLED,), "cancelled")


@login_not_required
@extend_schema(
    request=None,
    responses={200: s.RunSerializer, **DENIED, **MISSING, **CONFLICT},
    description="Continue a failed, cancelled or waiting run from its last "
    "checkpoint, with the same idempotency keys.",
)
@api_view(["POST"])
def run_resume(request: Request, run_id: str) -> Response:
    run = _operated(request, run_id)
    done = runs_service.resume(run, user=request.user)
    if not done and run.redacted_at is not None:
        detail = runs_service.not_resumed(run)
        return Response({"detail": detail}, status=http.HTTP_409_CONFLICT)
    return _action_result(request, run, done, (Run.Status.QUEUED, Run.Status.RUNNING), "resumed")


@login_not_required
@extend_schema(
    request=s.ForkSerializer,
    responses={201: s.RunSerializer, **DENIED, **MISSING, **INVALID},
    description="A new run reusing the recorded steps before `position`, optionally with "
    "an edited input or an edited output of the last reused step. A LangGraph thread "
    "forks from `checkpoint_id` instead, with nothing else: no edits, no reused decisions.",
)
@api_view(["POST"])
def run_fork(request: Request, run_id: str) -> Response:
    run = _operated(request, run_id)
    form = s.ForkSerializer(data=request.data)
    form.is_valid(raise_exception=True)
    data = form.validated_data
    if run.kind == Run.Kind.LANGGRAPH:
        return _fork_thread(request, run, data)
    if "position" not in data:
        raise ValidationError({"position": ["This field is required to fork a native run."]})
    try:
        child = runs_service.fork(
            run,
            data["position"],
            user=request.user,
            sandbox=data["sandbox"],
            reuse_approvals=data["reuse_approvals"],
            # None keeps the parent's input, like the web form; the engine refuses a non-object.
            input=data.get("input"),
            output=data.get("output", replay.KEEP_OUTPUT),
        )
    except replay.ForkError as exc:
        return Response({"detail": str(exc)}, status=http.HTTP_400_BAD_REQUEST)
    return Response(
        s.RunSerializer(child, context={"request": request}).data, status=http.HTTP_201_CREATED
    )


def _fork_thread(request: Request, run: Run, data: dict[str, Any]) -> Response:
    """A LangGraph thread forks from a checkpoint and takes nothing else: an edit, a
    resume value or a reused decision would be a decision nobody made
    (services.langgraph.fork_thread). Unknown keys are refused too, not ignored."""
    sent = request.data.keys() if hasattr(request.data, "keys") else ()
    extra = sorted(
        str(k)[:40]
        for k in sent
        if k != "checkpoint_id" and not (k in ("sandbox", "reuse_approvals") and not data[k])
    )
    if extra or "checkpoint_id" not in data:
        detail = "a LangGraph thread forks from a checkpoint_id only"
        if extra:
            detail += f" (not {', '.join(extra)}: the fork asks its interrupts again instead)"
        return Response({"detail": detail}, status=http.HTTP_400_BAD_REQUEST)
    try:
        child = langgraph_service.fork_thread(run, data["checkpoint_id"], user=request.user)
    except langgraph_service.ForkRefused as exc:
        return Response({"detail": str(exc)}, status=http.HTTP_400_BAD_REQUEST)
    return Response(
        s.RunSerializer(child, context={"request": request}).data, status=http.HTTP_201_CREATED
    )


@login_not_required
@extend_schema(
    parameters=[OpenApiParameter("position", OpenApiTypes.INT, required=True)],
    responses={200: s.EffectSerializer(many=True), **DENIED, **MISSING, **INVALID},
    description="The effects a fork from `position` would execute again, with new keys.",
)
@api_view(["GET"])
def run_fork_preview(request: Request, run_id: str) -> Response:
    run = _operated(request, run_id)
    query = s.ForkPreviewQuery(data=request.query_params)
    query.is_valid(raise_exception=True)
    effects = replay.fork_preview(run, query.validated_data["position"])
    return Response(s.EffectSerializer(effects, many=True, context={"request": request}).data)


@login_not_required
@extend_schema(
    responses={200: s.ReplayReportSerializer, **DENIED, **MISSING},
    description="Dry replay: agent code against the recorded history, with every "
    "tool and model call forbidden. Writes nothing.",
)
@api_view(["GET"])
def run_replay(request: Request, run_id: str) -> Response:
    run = _operated(request, run_id)
    return Response(s.ReplayReportSerializer(runs_service.dry_replay(run)).data)


# --- Effects -----------------------------------------------------------------------------


@login_not_required
@extend_schema(
    operation_id="effects_list",
    responses={200: s.EffectPage, **DENIED, **INVALID},
    parameters=_page_params(
        OpenApiParameter(
            "state",
            OpenApiTypes.STR,
            enum=Effect.State.values,
            description="`unknown` lists the open escalations",
        ),
        OpenApiParameter("idempotency_key", OpenApiTypes.STR, description="exact match"),
    ),
)
@api_view(["GET"])
def effects(request: Request) -> Response:
    _require(request, roles.VIEW_RUNS)
    queryset = Effect.objects.select_related("resolved_by")
    if state := _choice(request, "state", Effect.State):
        queryset = queryset.filter(state=state)
    if key := request.query_params.get("idempotency_key"):
        queryset = queryset.filter(idempotency_key=key)
    return _page(request, queryset, EffectCursor, s.EffectSerializer)


@login_not_required
@extend_schema(responses={200: s.EffectSerializer, **DENIED, **MISSING})
@api_view(["GET"])
def effect_detail(request: Request, effect_id: int) -> Response:
    _require(request, roles.VIEW_RUNS)
    effect = get_object_or_404(Effect.objects.select_related("resolved_by"), pk=effect_id)
    return Response(s.EffectSerializer(effect, context={"request": request}).data)


@login_not_required
@extend_schema(
    request=s.ResolveSerializer,
    responses={200: s.EffectSerializer, **DENIED, **MISSING, **INVALID, **CONFLICT},
    description="Resolve an escalation (an effect whose outcome is unknown): "
    "`happened` with the result the call returned, `not_happened` to call it "
    "again with the same key, or `aborted` to cancel the run.",
)
@api_view(["POST"])
def effect_resolve(request: Request, effect_id: int) -> Response:
    _require(request, roles.OPERATE_RUNS)
    effect = get_object_or_404(Effect, pk=effect_id)
    form = s.ResolveSerializer(data=request.data)
    form.is_valid(raise_exception=True)
    data = form.validated_data
    try:
        resolved = escalations.resolve(
            effect, data["resolution"], user=request.user, result=data["result"], note=data["note"]
        )
    except (escalations.NotEscalated, escalations.AlreadyResolved) as exc:
        return Response({"detail": str(exc)}, status=http.HTTP_409_CONFLICT)
    except DurableRunsError as exc:
        return Response({"detail": str(exc)}, status=http.HTTP_400_BAD_REQUEST)
    return Response(s.EffectSerializer(resolved, context={"request": request}).data)


# --- Approvals -----------------------------------------------------------------------------


@login_not_required
@extend_schema(
    operation_id="approvals_list",
    responses={200: s.ApprovalPage, **DENIED, **INVALID},
    parameters=_page_params(
        OpenApiParameter("state", OpenApiTypes.STR, enum=Approval.State.values)
    ),
)
@api_view(["GET"])
def approvals_list(request: Request) -> Response:
    _require(request, roles.VIEW_RUNS)
    queryset = Approval.objects.all()
    if state := _choice(request, "state", Approval.State):
        queryset = queryset.filter(state=state)
    return _page(request, queryset, ApprovalCursor, s.ApprovalSerializer)


@login_not_required
@extend_schema(responses={200: s.ApprovalSerializer, **DENIED, **MISSING})
@api_view(["GET"])
def approval_detail(request: Request, approval_id: int) -> Response:
    _require(request, roles.VIEW_RUNS)
    return Response(s.ApprovalSerializer(get_object_or_404(Approval, pk=approval_id)).data)


@login_not_required
@extend_schema(
    request=s.DecideSerializer,
    responses={200: s.ApprovalSerializer, **DENIED, **MISSING, **INVALID, **CONFLICT},
    description="Approve, reject or edit-and-approve a pending approval. "
    "403 also when four-eyes review forbids the run's starter to approve; "
    "409 when someone already decided (the answer says who).",
)
@api_view(["POST"])
def approval_decide(request: Request, approval_id: int) -> Response:
    _require(request, roles.DECIDE_APPROVALS)
    approval = get_object_or_404(Approval.objects.select_related("run"), pk=approval_id)
    form = s.DecideSerializer(data=request.data)
    form.is_valid(raise_exception=True)
    data = form.validated_data
    try:
        decided = approvals.decide(
            approval,
            data["decision"],
            user=request.user,
            comment=data["comment"],
            payload=data["payload"],
        )
    except approvals.AlreadyDecided as exc:
        return Response({"detail": str(exc)}, status=http.HTTP_409_CONFLICT)
    except approvals.FourEyesRefused as exc:
        return Response({"detail": str(exc)}, status=http.HTTP_403_FORBIDDEN)
    except approvals.DecisionRefused as exc:
        return Response({"detail": str(exc)}, status=http.HTTP_400_BAD_REQUEST)
    return Response(s.ApprovalSerializer(decided).data)


@login_not_required
@extend_schema(exclude=True)
@api_view(["GET", "POST", "PUT", "PATCH", "DELETE"])
@permission_classes([AllowAny])
def not_found(request: Request) -> Response:
    raise NotFound("no such API endpoint")
