# specgate: multi-stage build. CGO is on for the SQLite cache store
# (github.com/mattn/go-sqlite3); the runtime image carries the binary, the
# shipped models and the example configs.

FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ENV CGO_ENABLED=1
# -tags milvus: the image supports every cache store (cache.index milvus too).
RUN go build -tags milvus -trimpath -ldflags="-s -w" -o /out/specgate ./cmd/specgate

FROM debian:bookworm-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends ca-certificates curl \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --system --home /app --uid 10001 specgate \
 && mkdir -p /data && chown specgate /data
WORKDIR /app
COPY --from=build /out/specgate /usr/local/bin/specgate
COPY models/ /app/models/
COPY configs/ /app/configs/
USER specgate
ENV SPECGATE_ADDR=0.0.0.0:8080 \
    SPECGATE_DATA_DIR=/data
VOLUME ["/data"]
EXPOSE 8080
HEALTHCHECK --interval=10s --timeout=3s --start-period=20s \
  CMD curl -fsS http://127.0.0.1:8080/readyz || exit 1
# Without --config: the shipped target model on CPU, SQLite cache in /data.
ENTRYPOINT ["specgate"]
CMD ["serve"]
