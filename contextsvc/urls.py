"""The URL conf: the API, the admin, login, and the dashboard pages every app contributes."""

from django.contrib import admin
from django.urls import include, path

from compaction.urls import urlpatterns as compaction_urls
from contextsvc.accounts import urlpatterns as accounts_urls
from contextsvc.api import api
from prompting.urls import urlpatterns as prompting_urls
from proxy.urls import urlpatterns as proxy_urls
from sessions.urls import urlpatterns as sessions_urls

# What escapes views and middleware: a 503 for a lost database, JSON under /api/.
handler500 = "contextsvc.middleware.server_error"
# An unknown URL under /api/ answers in the API's JSON error body.
handler404 = "contextsvc.middleware.page_not_found"

urlpatterns = [
    path("api/v1/", api.urls),
    # The drop-in proxy: async views, served by the ASGI process (contextsvc/asgi.py).
    path("proxy/", include(proxy_urls)),
    path("admin/", admin.site.urls),
    # Django's sign-in pages; password reset only where mail is delivered.
    path("accounts/", include(accounts_urls)),
    # One "dashboard" namespace for every app's pages: templates and tests
    # reverse "dashboard:<name>" whichever app serves it.
    path("", include((sessions_urls + prompting_urls + compaction_urls, "dashboard"))),
]
