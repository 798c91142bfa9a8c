from __future__ import annotations

from django.contrib.auth.decorators import login_not_required
from django.urls import path, re_path
from drf_spectacular.views import SpectacularSwaggerSplitView

from . import views
from .schema import SchemaView

urlpatterns = [
    # The schema describes the API, not its data: public, so tools can read it.
    path(
        "schema/",
        login_not_required(SchemaView.as_view(authentication_classes=[], permission_classes=[])),
        name="api-schema",
    ),
    # Browsable docs (Swagger UI from drf-spectacular-sidecar), public like the schema;
    # our template keeps its style in a file, as the CSP wants.
    path(
        "docs/",
        login_not_required(
            SpectacularSwaggerSplitView.as_view(
                url_name="api-schema",
                template_name="durableruns/api_docs.html",
                authentication_classes=[],
                permission_classes=[],
            )
        ),
        name="api-docs",
    ),
    path("runs/", views.runs, name="api-runs"),
    path("runs/<str:run_id>/", views.run_detail, name="api-run"),
    path("runs/<str:run_id>/steps/", views.run_steps, name="api-run-steps"),
    path("runs/<str:run_id>/effects/", views.run_effects, name="api-run-effects"),
    path("runs/<str:run_id>/approvals/", views.run_approvals, name="api-run-approvals"),
    path("runs/<str:run_id>/audit/", views.run_audit, name="api-run-audit"),
    path("runs/<str:run_id>/cancel/", views.run_cancel, name="api-run-cancel"),
    path("runs/<str:run_id>/resume/", views.run_resume, name="api-run-resume"),
    path("runs/<str:run_id>/fork/", views.run_fork, name="api-run-fork"),
    path("runs/<str:run_id>/fork-preview/", views.run_fork_preview, name="api-run-fork-preview"),
    path("runs/<str:run_id>/replay/", views.run_replay, name="api-run-replay"),
    path("effects/", views.effects, name="api-effects"),
    path("effects/<int:effect_id>/", views.effect_detail, name="api-effect"),
    path("effects/<int:effect_id>/resolve/", views.effect_resolve, name="api-effect-resolve"),
    path("approvals/", views.approvals_list, name="api-approvals"),
    path("approvals/<int:approval_id>/", views.approval_detail, name="api-approval"),
    path("approvals/<int:approval_id>/decide/", views.approval_decide, name="api-approval-decide"),
    # Clients of a JSON API get JSON errors, also for a path nothing here matches.
    re_path(r"", views.not_found, name="api-not-found"),
]
