# outbox-forwarder's image: the forwarder and the example inbox consumer
# (`notification-planner`, entry point `notification-planner`), built in the
# first stage (librdkafka
# from the rdkafka crate's bundled sources against the system OpenSSL, no
# cmake), on a slim Debian with OpenSSL's library and the CA roots, run as
# an unprivileged user. Works with a read-only root file system: only the
# checkpoint volume is written.
#
#   docker build --build-arg VERSION=0.1.0 --build-arg COMMIT=$(git rev-parse --short=12 HEAD) -t outbox-forwarder .
#
# The base images are build arguments whose defaults are the public ones.
# `--target prebuilt` takes binaries built elsewhere from prebuilt/ in the
# build context instead (the tests use the ones the suite built), skipping
# the build stage; the image is otherwise the same.
ARG BUILD_IMAGE=docker.io/library/rust:1.95-bookworm
ARG RUNTIME_IMAGE=docker.io/library/debian:bookworm-slim

FROM ${BUILD_IMAGE} AS build
RUN apt-get update && apt-get install -y --no-install-recommends libssl-dev libcurl4-openssl-dev libsasl2-dev pkg-config \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
ARG COMMIT=unknown
RUN OUTBOX_FORWARDER_COMMIT="${COMMIT}" cargo build --release --locked \
        --bin outbox-forwarder --bin notification-planner \
    && cp target/release/outbox-forwarder target/release/notification-planner /

FROM ${RUNTIME_IMAGE} AS runtime
# OpenSSL's library (librdkafka's TLS and SCRAM), libcurl (its OIDC
# client), Cyrus SASL with its Kerberos plugin (GSSAPI), the CA roots (TLS
# to managed brokers) and tini (PID 1: it reaps what a token command leaves
# behind and passes SIGTERM on), unless the base image has them already.
RUN dpkg -s ca-certificates libssl3 libcurl4 libsasl2-2 libsasl2-modules-gssapi-mit tini >/dev/null 2>&1 || { \
        apt-get update \
        && apt-get install -y --no-install-recommends ca-certificates libssl3 libcurl4 \
            libsasl2-2 libsasl2-modules-gssapi-mit tini \
        && rm -rf /var/lib/apt/lists/*; }
COPY docker/forwarder.toml docker/notification-planner.toml /etc/outbox-forwarder/
# The checkpoint (sled) lives on a volume owned by the unprivileged user.
RUN mkdir -p /var/lib/outbox-forwarder && chown 10001:10001 /var/lib/outbox-forwarder
VOLUME /var/lib/outbox-forwarder
WORKDIR /var/lib/outbox-forwarder
USER 10001:10001
# /metrics, /healthz, /readyz (metrics.listen in the configuration).
EXPOSE 9464
# Alive: the binary asks its own /healthz; no shell or HTTP client needed.
HEALTHCHECK --interval=10s --timeout=5s --start-period=10s --retries=3 \
    CMD ["outbox-forwarder", "healthcheck", "--config", "/etc/outbox-forwarder/forwarder.toml"]
# SIGTERM drains the acks and writes the last checkpoint
# (kafka.drain_timeout_ms): give a stop at least that long.
STOPSIGNAL SIGTERM
ARG VERSION=unknown
ARG COMMIT=unknown
LABEL org.opencontainers.image.title="outbox-forwarder" \
      org.opencontainers.image.description="Forwards MySQL outbox inserts from the binlog to Kafka" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}" \
      org.opencontainers.image.licenses="MIT OR Apache-2.0"
ENTRYPOINT ["/usr/bin/tini", "--", "outbox-forwarder"]
CMD ["run", "--config", "/etc/outbox-forwarder/forwarder.toml"]

# Binaries built elsewhere: docker build --target prebuilt (see above).
FROM runtime AS prebuilt
COPY prebuilt/outbox-forwarder prebuilt/notification-planner /usr/local/bin/

# The default: the build stage's binaries.
FROM runtime
COPY --from=build /outbox-forwarder /notification-planner /usr/local/bin/
