# syntax=docker/dockerfile:1
#
# Build:  docker build -t omnisym .
# Run:    docker run -p 3021:3021 -v omnisym-cache:/data omnisym

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
    && useradd --system --uid 10001 --user-group --home-dir /data --no-create-home omnisym \
    && mkdir -p /data /etc/omnisym \
    && chown omnisym:omnisym /data
COPY --from=builder /usr/local/bin/omnisym /usr/local/bin/omnisym
COPY docker/config.yml /etc/omnisym/config.yml
USER omnisym
WORKDIR /data
VOLUME ["/data"]
EXPOSE 3021
ENTRYPOINT ["omnisym"]
CMD ["run", "-c", "/etc/omnisym/config.yml"]
