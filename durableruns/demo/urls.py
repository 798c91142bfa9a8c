from django.urls import path

from . import model, providers

urlpatterns = [
    path("v1/chat/completions", model.chat_completions, name="model-chat-completions"),
    path("v1/messages", model.messages, name="model-messages"),
    path("orders/<str:order_id>", providers.order, name="provider-order"),
    path("search", providers.search, name="provider-search"),
    path("<str:provider>/dedupe", providers.execute_deduplicated, name="provider-dedupe"),
    path("<str:provider>/lookup/<path:key>", providers.lookup, name="provider-lookup"),
    path("<str:provider>/<str:mode>", providers.execute_plain, name="provider-execute"),
]
