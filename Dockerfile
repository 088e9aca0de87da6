# One image for every Tepat process: the command picks the part (api, scheduler, consumers, sandbox).
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY tepat ./tepat
COPY api ./api
COPY scheduler ./scheduler
COPY consumers ./consumers
RUN pip install --no-cache-dir .
RUN useradd --system --home /app tepat
USER tepat
ENTRYPOINT ["tepat"]
