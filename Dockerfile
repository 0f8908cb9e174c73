# Builds the outbox-forwarder binary. librdkafka is compiled from the rdkafka
# crate's bundled sources (no cmake needed) against the system OpenSSL.
FROM rust:1.85-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends libssl-dev pkg-config \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release -p outbox-forwarder

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates libssl3 \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/outbox-forwarder /usr/local/bin/outbox-forwarder
VOLUME /var/lib/outbox-forwarder
ENTRYPOINT ["outbox-forwarder"]
CMD ["run", "--config", "/etc/outbox-forwarder/forwarder.toml"]
