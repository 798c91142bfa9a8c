"""The API's OpenAPI schema, served to anyone (tools read it) and generated once per
process: it is the same for every request (public, no API versions, no languages), and
generating it anew cost 25 ms of CPU on every request, which anyone could ask for without
logging in."""

from __future__ import annotations

from typing import Any

from drf_spectacular.generators import SchemaGenerator
from drf_spectacular.views import SpectacularAPIView


class _OncePerProcess(SchemaGenerator):
    _public: dict[Any, Any] = {}  # the public schema, by API version

    def get_schema(self, request: Any = None, public: bool = False) -> Any:
        if not public:  # a non-public schema depends on who asks
            return super().get_schema(request=request, public=public)
        if self.api_version not in self._public:
            self._public[self.api_version] = super().get_schema(request=request, public=True)
        return self._public[self.api_version]


class SchemaView(SpectacularAPIView):
    generator_class = _OncePerProcess
    serve_public = True
