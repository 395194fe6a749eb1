"""The proxy process's URLs: ``/proxy/`` only (the API and dashboard live on the WSGI server)."""

from django.urls import include, path

from proxy.urls import urlpatterns as proxy_urls

handler404 = "contextsvc.middleware.page_not_found"
handler500 = "contextsvc.middleware.server_error"

urlpatterns = [path("proxy/", include(proxy_urls))]
