# One image for every role: web (gunicorn), worker, beat and the one-shot migrate.
# The product is installed from its wheel, templates and static files inside it, so an
# image built FROM this one adds agents with `pip install` (README, "Shipping your own agents").
FROM python:3.13-slim AS wheel
WORKDIR /src
COPY pyproject.toml README.md ./
COPY durableruns ./durableruns
COPY templates ./templates
COPY static ./static
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .

FROM python:3.13-slim

# The app's own virtualenv, owned by the app user, so `RUN pip install my-agents` in a
# derived image (which runs as that user) installs beside the product.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DJANGO_SETTINGS_MODULE=durableruns.settings_production \
    VIRTUAL_ENV=/opt/durableruns \
    PATH=/opt/durableruns/bin:$PATH \
    STATIC_ROOT=/app/staticfiles \
    DURABLERUNS_VAR_DIR=/app/var

RUN useradd --create-home --uid 10001 durableruns \
    && mkdir /opt/durableruns /app \
    && chown durableruns:durableruns /opt/durableruns /app
USER durableruns
WORKDIR /app
RUN python -m venv /opt/durableruns
COPY --from=wheel /wheels /tmp/wheels
RUN pip install --no-cache-dir /tmp/wheels/*.whl

COPY manage.py ./
# collectstatic needs settings but no secrets: throwaway keys for this step only.
RUN SECRET_KEY=collectstatic-only-$(python -c "import secrets; print(secrets.token_hex(32))") \
    DURABLERUNS_ENCRYPTION_KEYS=$(python -c "from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())") \
    python manage.py collectstatic --noinput

EXPOSE 8000
CMD ["gunicorn", "durableruns.wsgi:application", "--bind", "0.0.0.0:8000", "--workers", "3", "--worker-class", "durableruns.web.gunicorn_worker.ThreadWorker", "--threads", "8", "--env", "DURABLERUNS_CONN_MAX_AGE=60", "--access-logfile", "-", "--logger-class", "durableruns.logs.GunicornLogger"]
