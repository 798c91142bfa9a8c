"""Admin pages (under /manage/): retention policies, the sweep log, redaction rules,
and legal holds. Every change is audited.

Whatever can destroy data goes through a confirmation that shows exactly what will
happen (counts and a sample of the runs), computed from the values being saved. The
confirmation carries a signed token of those values and of the affected runs; the
save refuses (409, with the new preview) if either changed since.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import messages
from django.core import signing
from django.db import transaction
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import path, reverse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET, require_POST
from django_htmx.http import HttpResponseClientRedirect

from ..engine import registry
from ..engine.redaction import VALUE_PATTERNS, InvalidPattern, compile_pattern
from ..models import AuditEvent, RedactionRule, RetentionPolicy, RetentionSweep, Run
from ..roles import MANAGE_POLICIES, OPERATE_RUNS, permission_required
from ..services import audit, retention, reveal
from ..services.redaction_preview import preview_rule
from . import audit_log

SWEEPS_SHOWN = 20
HELD_SHOWN = 100
TERMINAL_CHOICES = [(s, s) for s in retention.TERMINAL_STATUSES]
PREVIEW_SALT = "durableruns.retention-preview"
TOKEN_MAX_AGE = 3600


class PolicyForm(forms.ModelForm):
    statuses = forms.MultipleChoiceField(
        choices=TERMINAL_CHOICES,
        widget=forms.CheckboxSelectMultiple,
        help_text="Only finished runs in these statuses are touched.",
    )
    agent = forms.ChoiceField(required=False, help_text="Leave at every agent to cover all.")
    # A hundred years: beyond it `now - age` overflows Python's dates. Declared here, so
    # Meta's label and help text do not apply: they are given with the field.
    age_days = forms.IntegerField(
        min_value=0,
        max_value=36_500,
        label="Older than (days)",
        help_text="Runs that finished more than this many days ago. 0 means every finished run.",
    )

    class Meta:
        model = RetentionPolicy
        fields = ["name", "agent", "statuses", "age_days", "action", "enabled"]
        labels = {"enabled": "Enabled (applied by the sweep)"}
        help_texts = {
            "action": "Delete removes the run and its history; redact keeps keys, states "
            "and decisions but blanks payloads.",
        }

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        names = sorted({a.name for a in registry.agents()} | {self.instance.agent} - {""})
        self.fields["agent"].choices = [("", "every agent"), *((n, n) for n in names)]


class RuleForm(forms.ModelForm):
    class Meta:
        model = RedactionRule
        fields = ["kind", "value", "note"]
        labels = {"value": "Key name or pattern"}
        help_texts = {
            "value": "A key name (e.g. employee_id) hides that key's value anywhere; a "
            "pattern (RE2 syntax, which always runs in linear time: no backreferences "
            "or lookaround) hides the text it matches.",
            "note": "Why this rule exists (shown here only).",
        }

    def clean(self) -> dict[str, Any]:
        data = super().clean()
        if data.get("kind") == RedactionRule.Kind.PATTERN and data.get("value"):
            try:
                compile_pattern(data["value"])
            except InvalidPattern as exc:
                self.add_error("value", str(exc))
        return data


def _snapshot(policy: RetentionPolicy) -> dict[str, Any]:
    return {
        "name": policy.name,
        "agent": policy.agent,
        "statuses": policy.statuses,
        "age_days": policy.age_days,
        "action": policy.action,
        "enabled": policy.enabled,
    }


# --- Retention policies ---------------------------------------------------------


@require_GET
@permission_required(MANAGE_POLICIES)
def policies(request: HttpRequest) -> HttpResponse:
    return _policies_page(request, PolicyForm())


def _token(values: dict[str, Any], found: retention.Impact) -> str:
    return signing.dumps({"values": values, "digest": found.digest}, salt=PREVIEW_SALT)


def _token_matches(token: str, values: dict[str, Any], found: retention.Impact) -> bool:
    try:
        signed = signing.loads(token, salt=PREVIEW_SALT, max_age=TOKEN_MAX_AGE)
    except signing.BadSignature:
        return False
    return signed == {"values": values, "digest": found.digest}


def _policies_page(
    request: HttpRequest, form: PolicyForm, *, pending: Any = None, status: int = 200, **extra: Any
) -> HttpResponse:
    rows = [(p, retention.preview([p])) for p in RetentionPolicy.objects.all()]
    context = {
        "rows": rows,
        "overall": retention.preview(p for p, _ in rows if p.enabled),
        "sweeps": RetentionSweep.objects.order_by("-started_at")[:SWEEPS_SHOWN],
        "form": form,
        "pending": pending,
        **extra,
    }
    template = "durableruns/admin/policies.html"
    if request.htmx and request.method == "POST":
        template += "#policy-form"
    return render(request, template, context, status=status)


@require_POST
@permission_required(MANAGE_POLICIES)
def policy_create(request: HttpRequest) -> HttpResponse:
    return _save_with_preview(request, PolicyForm(request.POST), "policy.create")


@require_POST
@permission_required(MANAGE_POLICIES)
def policy_update(request: HttpRequest, pk: int) -> HttpResponse:
    policy = get_object_or_404(RetentionPolicy, pk=pk)
    return _save_with_preview(
        request,
        PolicyForm(request.POST, instance=policy),
        "policy.update",
        before=_snapshot(policy),
    )


@require_GET
@permission_required(MANAGE_POLICIES)
def policy(request: HttpRequest, pk: int) -> HttpResponse:
    record = get_object_or_404(RetentionPolicy, pk=pk)
    return render(
        request,
        "durableruns/admin/policy.html",
        {"policy": record, "form": PolicyForm(instance=record), "pending": None},
    )


@require_GET
@permission_required(MANAGE_POLICIES)
def policy_delete_confirm(request: HttpRequest, pk: int) -> HttpResponse:
    record = get_object_or_404(RetentionPolicy, pk=pk)
    found = retention.impact([record])
    return render(
        request, "durableruns/admin/confirm_delete.html", {"policy": record, "found": found}
    )


def _save_with_preview(
    request: HttpRequest, form: PolicyForm, action: str, before: Any = None
) -> HttpResponse:
    """The first submit previews; the save must carry the token of that very preview."""
    if not form.is_valid():
        return _render_form(request, form, None, status=400)
    candidate = form.save(commit=False)
    found = retention.impact([candidate])
    pending = found.preview
    token = _token(_snapshot(candidate), found)
    if request.POST.get("confirm") != "save":
        return _render_form(request, form, found, token=token)
    if not _token_matches(request.POST.get("preview_token", ""), _snapshot(candidate), found):
        return _render_form(request, form, found, token=token, stale=True, status=409)
    with transaction.atomic():
        if candidate.pk is None:
            candidate.created_by = request.user
        candidate.save()
        audit.record(request.user, action, candidate, before=before, after=_snapshot(candidate))
    messages.success(request, f"Saved policy {candidate.name!r}: {pending}.")
    if request.htmx:  # the form was swapped in place; show the whole page again
        return HttpResponseClientRedirect(reverse("policies"))
    return redirect("policies")


def _render_form(
    request: HttpRequest,
    form: PolicyForm,
    found: retention.Impact | None,
    status: int = 200,
    **extra: Any,
) -> HttpResponse:
    pending = found.preview if found else None
    if form.instance.pk:
        context = {"policy": form.instance, "form": form, "pending": pending, "found": found}
        template = "durableruns/admin/policy.html"
        if request.htmx:
            template += "#policy-form"
        return render(request, template, {**context, **extra}, status=status)
    return _policies_page(request, form, pending=pending, found=found, status=status, **extra)


@require_POST
@permission_required(MANAGE_POLICIES)
def policy_delete(request: HttpRequest, pk: int) -> HttpResponse:
    with transaction.atomic():
        record = RetentionPolicy.objects.filter(pk=pk).first()
        if record is not None:
            audit.record(request.user, "policy.delete", record, before=_snapshot(record))
            record.delete()
    return redirect("policies")


@require_GET
@permission_required(MANAGE_POLICIES)
def policies_apply_confirm(request: HttpRequest) -> HttpResponse:
    return _apply_confirm_page(request)


def _apply_confirm_page(request: HttpRequest, *, stale: bool = False) -> HttpResponse:
    enabled = list(RetentionPolicy.objects.filter(enabled=True))
    found = retention.impact(enabled)
    context = {
        "policies": enabled,
        "found": found,
        "token": _token({"policies": [_snapshot(p) for p in enabled]}, found),
        "stale": stale,
    }
    return render(
        request, "durableruns/admin/confirm_apply.html", context, status=409 if stale else 200
    )


@require_POST
@permission_required(MANAGE_POLICIES)
def policies_apply(request: HttpRequest) -> HttpResponse:
    """Apply the enabled policies now, as beat would, if the confirmed preview still
    holds; a dry run (counting only) needs no confirmation."""
    dry_run = request.POST.get("dry_run") == "1"
    if not dry_run:
        enabled = list(RetentionPolicy.objects.filter(enabled=True))
        values = {"policies": [_snapshot(p) for p in enabled]}
        if not _token_matches(
            request.POST.get("preview_token", ""), values, retention.impact(enabled)
        ):
            return _apply_confirm_page(request, stale=True)
    with transaction.atomic():
        audit.record(
            request.user,
            "retention.apply",
            SimpleNamespace(pk="enabled-policies"),
            target_type="retention",
            after={"dry_run": dry_run},
        )
    sweeps = retention.apply_all(dry_run=dry_run, triggered_by=request.user.username)
    total = sum(s.runs_affected for s in sweeps)
    verb = "would affect" if dry_run else "affected"
    messages.success(request, f"Retention sweep {verb} {total} runs.")
    return redirect("policies")


# --- Redaction rules --------------------------------------------------------------


@require_GET
@permission_required(MANAGE_POLICIES)
def redaction_rules(request: HttpRequest) -> HttpResponse:
    return _rules_page(request, RuleForm())


def _rules_page(
    request: HttpRequest, form: RuleForm, status: int = 200, found: Any = None
) -> HttpResponse:
    context = {
        "found": found,
        "rules": RedactionRule.objects.all(),
        "default_keys": settings.DURABLERUNS_REDACT_KEYS,
        "default_patterns": VALUE_PATTERNS,
        "form": form,
    }
    return render(request, "durableruns/admin/redaction.html", context, status=status)


@require_POST
@permission_required(MANAGE_POLICIES)
def redaction_rule_create(request: HttpRequest) -> HttpResponse:
    form = RuleForm(request.POST)
    if not form.is_valid():
        return _rules_page(request, form, status=400)
    with transaction.atomic():
        rule = form.save(commit=False)
        rule.created_by = request.user
        rule.save()
        audit.record(
            request.user,
            "redaction_rule.create",
            rule,
            after={"kind": rule.kind, "value": rule.value, "note": rule.note},
        )
    return redirect("redaction-rules")


@require_POST
@permission_required(MANAGE_POLICIES)
def redaction_rule_preview(request: HttpRequest) -> HttpResponse:
    """What the rule in the form would match in recent runs; nothing is saved."""
    form = RuleForm(request.POST)
    valid = form.is_valid()
    found = preview_rule(form.cleaned_data["kind"], form.cleaned_data["value"]) if valid else None
    status = 200 if valid else 400
    if request.htmx:
        context = {"found": found, "form": form}
        return render(
            request, "durableruns/admin/redaction.html#rule-preview", context, status=status
        )
    return _rules_page(request, form, status=status, found=found)


@require_POST
@permission_required(MANAGE_POLICIES)
def redaction_rule_delete(request: HttpRequest, pk: int) -> HttpResponse:
    with transaction.atomic():
        rule = RedactionRule.objects.filter(pk=pk).first()
        if rule is not None:
            audit.record(
                request.user,
                "redaction_rule.delete",
                rule,
                before={"kind": rule.kind, "value": rule.value, "note": rule.note},
            )
            rule.delete()
    return redirect("redaction-rules")


# --- Legal hold: operators set it, only admins clear it ----------------------------


@require_POST
@permission_required(OPERATE_RUNS)
def run_hold(request: HttpRequest, run_id: str) -> HttpResponse:
    return _set_hold(request, run_id, True)


@require_POST
@permission_required(MANAGE_POLICIES)
def run_release(request: HttpRequest, run_id: str) -> HttpResponse:
    return _set_hold(request, run_id, False)


def _set_hold(request: HttpRequest, run_id: str, hold: bool) -> HttpResponse:
    run = get_object_or_404(Run, pk=run_id)
    reason = request.POST.get("reason", "").strip()[:500] if hold else ""
    if hold and not reason:
        messages.error(request, "A legal hold needs a reason (a case or ticket reference).")
        return redirect(run.get_absolute_url())
    with transaction.atomic():
        changed = Run.objects.filter(pk=run_id, legal_hold=not hold).update(
            legal_hold=hold, legal_hold_reason=reason
        )
        if changed:
            audit.record(
                request.user,
                "run.legal_hold" if hold else "run.legal_hold_clear",
                run,
                before={"legal_hold": not hold, "reason": run.legal_hold_reason},
                after={"legal_hold": hold, "reason": reason},
            )
    return redirect(run.get_absolute_url())


# --- Sealed secrets: admins see which values are sealed and reveal one, with a reason --


@require_GET
@permission_required(MANAGE_POLICIES)
def run_secrets(request: HttpRequest, run_id: str) -> HttpResponse:
    run = get_object_or_404(Run, pk=run_id)
    return render(request, "durableruns/admin/secrets.html", {"run": run, "sealed": _sealed(run)})


@never_cache  # the plaintext stays in no browser or proxy cache
@require_POST
@permission_required(MANAGE_POLICIES)
def secret_reveal(
    request: HttpRequest, run_id: str, kind: str, pk: str, field: str
) -> HttpResponse:
    run = get_object_or_404(Run, pk=run_id)
    try:
        row = reveal.find(run_id, kind, pk)
        value = reveal.reveal(request.user, row, field, request.POST.get("reason", ""))
    except reveal.RevealError as exc:
        context = {"run": run, "sealed": _sealed(run), "error": str(exc)}
        return render(request, "durableruns/admin/secrets.html", context, status=400)
    context = {"run": run, "kind": kind, "pk": pk, "field": field, "value": value}
    return render(request, "durableruns/admin/secret_revealed.html", context)


def _sealed(run: Run) -> list[SimpleNamespace]:
    rows: list[Any] = [run]
    for name in ("steps", "effects", "approvals"):
        rows.extend(getattr(run, name).exclude(secrets="").order_by("position"))
    return [
        # As stored (redacted), in JSON as every other page shows values.
        SimpleNamespace(
            kind=type(row)._meta.model_name, row=row, field=field, shown=getattr(row, field)
        )
        for row in rows
        for field in reveal.sealed_fields(row)
    ]


@require_GET
@permission_required(MANAGE_POLICIES)
def held_runs(request: HttpRequest) -> HttpResponse:
    """Every run on legal hold, with its reason; filter by agent or text."""
    q = request.GET.get("q", "").strip()[:200]
    rows = Run.objects.filter(legal_hold=True).order_by("-created_at", "id")
    if q:
        rows = rows.filter(
            Q(id__icontains=q) | Q(agent__icontains=q) | Q(legal_hold_reason__icontains=q)
        )
    runs = list(rows[:HELD_SHOWN])
    _annotate_holds(runs)
    context = {"runs": runs, "total": rows.count(), "q": q}
    return render(request, "durableruns/admin/held.html", context)


def _annotate_holds(runs: list[Run]) -> None:
    """Who put each run on hold, and when: its latest hold in the audit log (one query)."""
    holds = AuditEvent.objects.filter(
        target_type="run", target_id__in=[r.pk for r in runs], action="run.legal_hold"
    ).order_by("pk")
    latest = {event.target_id: event for event in holds}
    for run in runs:
        run.hold_event = latest.get(run.pk)


urlpatterns = [
    path("policies/", policies, name="policies"),
    path("policies/new", policy_create, name="policy-create"),
    path("policies/apply", policies_apply, name="policies-apply"),
    path("policies/apply/confirm", policies_apply_confirm, name="policies-apply-confirm"),
    path("policies/<int:pk>/", policy, name="policy"),
    path("policies/<int:pk>/edit", policy_update, name="policy-update"),
    path("policies/<int:pk>/delete", policy_delete, name="policy-delete"),
    path("policies/<int:pk>/delete/confirm", policy_delete_confirm, name="policy-delete-confirm"),
    path("holds/", held_runs, name="held-runs"),
    path("audit/", audit_log.audit_log, name="audit-log"),
    path("redaction/", redaction_rules, name="redaction-rules"),
    path("redaction/new", redaction_rule_create, name="redaction-rule-create"),
    path("redaction/preview", redaction_rule_preview, name="redaction-rule-preview"),
    path("redaction/<int:pk>/delete", redaction_rule_delete, name="redaction-rule-delete"),
]

run_urlpatterns = [
    path("runs/<str:run_id>/hold", run_hold, name="run-hold"),
    path("runs/<str:run_id>/release", run_release, name="run-release"),
    path("runs/<str:run_id>/secrets/", run_secrets, name="run-secrets"),
    path(
        "runs/<str:run_id>/secrets/<str:kind>/<str:pk>/<str:field>",
        secret_reveal,
        name="secret-reveal",
    ),
]
