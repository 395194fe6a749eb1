"""The prompting app's dashboard URLs; contextsvc/urls.py mounts them in the ``dashboard`` namespace."""

from django.urls import path

from .dashboard import views

urlpatterns = [
    path("sessions/<int:pk>/context/", views.session_context, name="session_context"),
    path("sessions/<int:pk>/context.json", views.session_context_json, name="session_context_json"),
]
