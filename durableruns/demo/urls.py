from django.urls import path

from . import providers

urlpatterns = [
    path("orders/<str:order_id>", providers.order, name="provider-order"),
    path("search", providers.search, name="provider-search"),
    path("<str:provider>/dedupe", providers.execute_deduplicated, name="provider-dedupe"),
    path("<str:provider>/lookup/<path:key>", providers.lookup, name="provider-lookup"),
    path("<str:provider>/<str:mode>", providers.execute_plain, name="provider-execute"),
]
