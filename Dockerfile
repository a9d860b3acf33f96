# pgoutbox relay image: a static binary (CGO_ENABLED=0) on an empty base,
# running as a non-root user. Build where Docker (or any OCI builder) exists:
#
#   docker build -t pgoutbox --build-arg VERSION=$(git describe --tags --always) \
#     --build-arg COMMIT=$(git rev-parse HEAD) .
#   docker run --rm -e DATABASE_URL=postgres://... -p 9090:9090 pgoutbox \
#     run --publisher nats --nats-url nats://nats:4222 --metrics-addr :9090
#
# The relay is PID 1 and handles SIGTERM itself (docker stop, Kubernetes):
# it stops claiming, hands back claimed messages it has not started,
# lets publishes in flight finish for --shutdown-timeout and exits 0. Give
# the container more than --shutdown-timeout + 5s + 2s to stop (docker stop
# -t, terminationGracePeriodSeconds; see deploy/).

# --- build ------------------------------------------------------------------
# The Go line of go.mod (1.25) or newer.
ARG GO_IMAGE=golang:1.25-bookworm
FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=devel
ARG COMMIT=unknown
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/pgoutbox/pgoutbox/internal/buildinfo.Version=${VERSION} -X github.com/pgoutbox/pgoutbox/internal/buildinfo.Commit=${COMMIT}" \
      -o /out/pgoutbox ./cmd/pgoutbox \
 && /out/pgoutbox version

# --- run --------------------------------------------------------------------
# Nothing but the binary and the CA certificates (TLS to PostgreSQL, brokers
# and webhook receivers).
FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/pgoutbox /pgoutbox
# 65532: the conventional "nonroot" uid/gid; no shell, no home, no passwd entry needed.
USER 65532:65532
EXPOSE 9090
STOPSIGNAL SIGTERM
ENTRYPOINT ["/pgoutbox"]
CMD ["--help"]
