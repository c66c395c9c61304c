# The sunk-scheduler image: the package and its dependencies on python:3.11-slim, run as a
# non-root user. From the repository root:
#   docker build -t ghcr.io/sunk-project/sunk:0.1.0 .
# The Helm chart (charts/sunk) passes every flag; without it, see `sunk-scheduler --help`.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY sunk ./sunk
COPY web ./web
RUN pip install . && rm -rf /src

# The default policies, for running without the chart's ConfigMap (--policies-dir).
COPY policies/*.yaml /etc/sunk/policies/
ENV SUNK_POLICIES_DIR=/etc/sunk/policies

RUN groupadd --system --gid 65532 sunk \
    && useradd --system --uid 65532 --gid 65532 --no-create-home --home-dir /nonexistent \
       --shell /usr/sbin/nologin sunk
USER 65532:65532
WORKDIR /

# hooks API, metrics, health probes, dashboard
EXPOSE 8000 8080 8081 8082
ENTRYPOINT ["sunk-scheduler"]
