# One image for every service of docker-compose.yml: workers, beat, Flower, the console.
FROM python:3.11-slim
WORKDIR /app
# Debian's chromium, for the render workers (--render): never a browser a tool downloads.
RUN apt-get update && apt-get install -y --no-install-recommends chromium && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml README.md beat_schedule.py ./
COPY crawler ./crawler
RUN pip install --no-cache-dir .
# Workers run as an unprivileged user; Celery warns against root.
RUN useradd --create-home crawler && mkdir -p /data && chown crawler /data
USER crawler
