"""The JSON API under /api/ (ARCHITECTURE.md section 8), with its OpenAPI schema."""
