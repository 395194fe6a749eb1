from django.contrib import admin
from django.urls import include, path

from contextsvc.api import api

urlpatterns = [
    path("api/v1/", api.urls),
    path("admin/", admin.site.urls),
    path("accounts/", include("django.contrib.auth.urls")),
    path("", include("sessions.urls")),
]
