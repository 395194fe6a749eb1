"""The compaction app's dashboard URLs; contextsvc/urls.py mounts them in the ``dashboard`` namespace."""

from django.urls import path

from .dashboard import views

urlpatterns = [
    path("sessions/<int:pk>/compact/", views.compact_start, name="compact_start"),
    path("sessions/<int:pk>/compact/preview/", views.compact_preview, name="compact_preview"),
    path("sessions/<int:pk>/compactions/", views.compaction_history, name="compaction_history"),
    path(
        "sessions/<int:pk>/compactions/<str:run_id>/",
        views.compaction_status,
        name="compaction_status",
    ),
    path(
        "sessions/<int:pk>/snapshots/<int:snapshot_id>/",
        views.snapshot_detail,
        name="snapshot_detail",
    ),
    path(
        "sessions/<int:pk>/snapshots/<int:snapshot_id>/restore/",
        views.snapshot_restore,
        name="snapshot_restore",
    ),
    path(
        "sessions/<int:pk>/snapshots/uncompacted/restore/",
        views.snapshot_restore,
        name="snapshot_restore_uncompacted",
    ),
]
