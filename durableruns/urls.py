from django.conf import settings
from django.contrib.auth import views as auth_views
from django.urls import include, path, re_path

from .web import (
    actions,
    approvals,
    langgraph,
    ledger,
    login_throttle,
    monitoring,
    policies,
    saved_views,
    start,
    views,
)

urlpatterns = [
    path("", views.runs, name="runs"),
    # Not runs/new/: "new" is a valid run id.
    path("runs-new/", start.start_run, name="run-start"),
    path("runs/<str:run_id>/", views.run, name="run"),
    path("approvals/", approvals.inbox, name="approvals"),
    path("approvals/<int:pk>/", approvals.approval, name="approval"),
    path("approvals/<int:pk>/decide/", approvals.decide_approval, name="decide_approval"),
    path("approvals/<int:pk>/claim/", approvals.claim_approval, name="claim_approval"),
    # Operator dashboard (issue 5)
    path("runs-statuses/", views.run_statuses, name="run-statuses"),
    path("runs-bulk/", actions.bulk, name="runs-bulk"),
    # Saved views of the runs page (issue 24): a person's own, not runs/views/ ("views"
    # is a valid run id).
    path("runs-views/", saved_views.save, name="run-views-save"),
    path("runs-views/<int:pk>/delete/", saved_views.delete, name="run-view-delete"),
    path("runs/<str:run_id>/steps/<int:position>/", views.run_step, name="run-step"),
    path("runs/<str:run_id>/cancel/", actions.cancel, name="run-cancel"),
    path("runs/<str:run_id>/resume/", actions.resume, name="run-resume"),
    path("runs/<str:run_id>/replay/", actions.replay, name="run-replay"),
    path("runs/<str:run_id>/fork/", actions.fork, name="run-fork"),
    path("runs/<str:run_id>/langgraph-fork/", langgraph.fork, name="langgraph-fork"),
    path("effects/", ledger.effects, name="effects"),
    path("escalations/", ledger.escalations, name="escalations"),
    path("escalations/<int:effect_id>/resolve/", ledger.resolve, name="escalation-resolve"),
    path("escalations/<int:effect_id>/lookup/", ledger.lookup, name="escalation-lookup"),
    path("login/", login_throttle.login, name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("healthz", monitoring.healthz, name="healthz"),
    # Pages link the icon; API docs, JSON answers and old browsers ask for this path.
    path("favicon.ico", views.favicon, name="favicon"),
    path("metrics", monitoring.metrics_page, name="metrics"),
    path("manage/", include(policies.urlpatterns)),
    # The admin pages lived under /admin/ (Django's admin is not used): old links still work.
    re_path(r"^admin/(?P<rest>.*)$", views.moved_to_manage, name="admin-moved"),
    path("home/", views.home, name="home"),
    *policies.run_urlpatterns,
    path("api/", include("durableruns.api.urls")),
]
if settings.DURABLERUNS_DEMO_PROVIDERS:  # the demo and tests only, never production
    urlpatterns.append(path("providers/", include("durableruns.demo.urls")))

handler400 = "durableruns.web.errors.bad_request"
handler403 = "durableruns.web.errors.permission_denied"
handler404 = "durableruns.web.errors.page_not_found"
handler500 = "durableruns.web.errors.server_error"
