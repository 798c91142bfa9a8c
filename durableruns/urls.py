from django.contrib.auth import views as auth_views
from django.urls import include, path

from .web import login_throttle, monitoring, policies, views

urlpatterns = [
    path("", views.runs, name="runs"),
    path("runs/<str:run_id>/", views.run, name="run"),
    path("login/", login_throttle.login, name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("healthz", monitoring.healthz, name="healthz"),
    path("metrics", monitoring.metrics_page, name="metrics"),
    path("admin/", include(policies.urlpatterns)),
    *policies.run_urlpatterns,
    path("providers/", include("durableruns.demo.urls")),
]
