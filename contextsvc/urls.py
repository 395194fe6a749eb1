from django.contrib import admin
from django.urls import include, path

from contextsvc.api import api

# What escapes views and middleware: a 503 for a lost database, JSON under /api/.
handler500 = "contextsvc.middleware.server_error"
# An unknown URL under /api/ answers in the API's JSON error body.
handler404 = "contextsvc.middleware.page_not_found"

urlpatterns = [
    path("api/v1/", api.urls),
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("", include("sessions.urls")),
]
