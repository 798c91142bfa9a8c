from django.contrib.auth import views as auth_views
from django.urls import include, path

from .web import approvals, views

urlpatterns = [
    path("", views.runs, name="runs"),
    path("runs/<str:run_id>/", views.run, name="run"),
    path("approvals/", approvals.inbox, name="approvals"),
    path("approvals/<int:pk>/", approvals.approval, name="approval"),
    path("approvals/<int:pk>/decide/", approvals.decide_approval, name="decide_approval"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("healthz", views.healthz, name="healthz"),
    path("providers/", include("durableruns.demo.urls")),
]
