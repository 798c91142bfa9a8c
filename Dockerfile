# One image for every role: web (gunicorn), worker, beat and the one-shot migrate.
FROM python:3.13-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DJANGO_SETTINGS_MODULE=durableruns.settings_production \
    PYTHONPATH=/app

WORKDIR /app
RUN useradd --create-home --uid 10001 durableruns

COPY pyproject.toml README.md ./
COPY durableruns ./durableruns
# Installs the dependencies; the code runs from /app (PYTHONPATH), beside templates/.
RUN pip install --no-cache-dir .

COPY manage.py ./
COPY templates ./templates
COPY static ./static
# collectstatic needs settings but no secrets: a throwaway key for this step only.
RUN SECRET_KEY=collectstatic-only-$(python -c "import secrets; print(secrets.token_hex(32))") \
    python manage.py collectstatic --noinput

USER durableruns
EXPOSE 8000
CMD ["gunicorn", "durableruns.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", "--access-logfile", "-"]
