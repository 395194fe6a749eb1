"""The proxy's paths (fixed: clients set their SDK's base URL to them)."""

from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from . import views, views_gemini, views_responses

urlpatterns = [
    path("anthropic/v1/messages", views.anthropic_messages, name="proxy-anthropic-messages"),
    path(
        "anthropic/v1/messages/count_tokens",
        views.anthropic_count_tokens,
        name="proxy-anthropic-count-tokens",
    ),
    path("anthropic/v1/models", views.anthropic_models, name="proxy-anthropic-models"),
    path(
        "openai/v1/chat/completions",
        views.openai_chat_completions,
        name="proxy-openai-chat-completions",
    ),
    path("openai/v1/responses", views_responses.responses_create, name="proxy-openai-responses"),
    path(
        "openai/v1/responses/compact",
        views_responses.responses_compact,
        name="proxy-openai-responses-compact",
    ),
    path(
        "openai/v1/responses/<str:response_id>",
        views_responses.responses_item,
        name="proxy-openai-response",
    ),
    path("openai/v1/models", views.openai_models, name="proxy-openai-models"),
    path(
        "gemini/v1beta/models/<str:target>",
        views_gemini.gemini_model_call,
        name="proxy-gemini-model-call",
    ),
    path("gemini/v1beta/models", views_gemini.gemini_models, name="proxy-gemini-models"),
    path("<path:rest>", csrf_exempt(views.not_found), name="proxy-not-found"),
]
