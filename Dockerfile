# syntax=docker/dockerfile:1
#
# Build:  docker build -t omnisym .
# Run:    docker run -p 3021:3021 -v omnisym-cache:/data omnisym
#
# The final stage is a drop-in for upstream Symbolicator's image in self-hosted Sentry:
# the same binary path (/bin/symbolicator), user (65532, the owner of the files upstream
# writes into the `sentry-symbolicator` volume), volumes and port.
# tests/integration/docker.rs reads this stage and runs its entrypoint with
# self-hosted's compose commands.

FROM rust:1-bookworm AS builder
WORKDIR /src
COPY . .
# The cache mounts keep the crate registry and build artefacts between builds; the binary is
# copied out because the target directory is not part of the image layer.
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked \
    && cp target/release/omnisym /usr/local/bin/omnisym

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /data /etc/symbolicator \
    && chown 65532:65532 /data /etc/symbolicator
COPY --from=builder /usr/local/bin/omnisym /usr/local/bin/omnisym
RUN ln -s /usr/local/bin/omnisym /bin/symbolicator
COPY docker/config.yml /etc/symbolicator/config.yml
USER 65532:65532
WORKDIR /data
VOLUME ["/data", "/etc/symbolicator"]
EXPOSE 3021
HEALTHCHECK CMD ["/bin/symbolicator", "healthcheck", "-c", "/etc/symbolicator/config.yml"]
ENTRYPOINT ["omnisym"]
CMD ["run", "-c", "/etc/symbolicator/config.yml"]
