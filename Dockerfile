# Builds the outbox-forwarder binary. librdkafka is compiled from the rdkafka
# crate's bundled sources (no cmake needed).
FROM rust:1.85-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release -p outbox-forwarder

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/target/release/outbox-forwarder /usr/local/bin/outbox-forwarder
VOLUME /var/lib/outbox-forwarder
ENTRYPOINT ["outbox-forwarder"]
CMD ["run", "--config", "/etc/outbox-forwarder/forwarder.toml"]
