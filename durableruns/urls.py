from django.contrib.auth import views as auth_views
from django.urls import include, path

from .web import views

urlpatterns = [
    path("", views.runs, name="runs"),
    path("runs/<str:run_id>/", views.run, name="run"),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("healthz", views.healthz, name="healthz"),
    path("providers/", include("durableruns.demo.urls")),
    path("api/", include("durableruns.api.urls")),
]
