# One image for every Tepat process: the command picks the part
# (serve, api, scheduler, consumers, sandbox expo, plan, dlq, doctor).
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
# The same pins as CI (constraints.txt, see scripts/lock.sh), so a build is reproducible.
COPY constraints.txt pyproject.toml README.md LICENSE ./
COPY tepat ./tepat
COPY api ./api
COPY scheduler ./scheduler
COPY consumers ./consumers
RUN pip install -c constraints.txt . \
 && rm -rf /src
COPY deploy/docker/healthcheck.py /usr/local/bin/tepat-healthcheck
RUN chmod 0755 /usr/local/bin/tepat-healthcheck

# A writable data directory, owned by the unprivileged user the processes run as: the
# SQLite default (tepat serve) keeps its database and the generated admin key file
# (.tepat-admin-key, beside the database) here. Mount a volume on it to keep them.
RUN groupadd --system --gid 10001 tepat \
 && useradd --system --uid 10001 --gid tepat --home-dir /data --no-create-home tepat \
 && mkdir -p /data \
 && chown tepat:tepat /data
ENV TEPAT_DATABASE_URL=sqlite:////data/tepat.db
VOLUME ["/data"]
WORKDIR /data
USER 10001:10001

# 8000: the API (tepat serve / tepat api); 8001: the Expo sandbox;
# 9464: /metrics of tepat scheduler and tepat consumers (TEPAT_METRICS_PORT).
EXPOSE 8000 8001 9464
HEALTHCHECK --interval=15s --timeout=5s --start-period=30s --retries=3 \
  CMD ["tepat-healthcheck"]
ENTRYPOINT ["tepat"]
CMD ["serve", "--host", "0.0.0.0", "--port", "8000"]
