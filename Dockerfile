# syntax=docker/dockerfile:1
# The gateway image: a static binary on distroless, running as non-root.
#   docker build -t karmada-exec-gateway:dev .
# For users with Docker. Releases come from `make image`, which builds the same
# layout (/gateway, user 65532:65532, /etc/ssl/certs/ca-certificates.crt)
# without a daemon or a base image, reproducibly per commit.

FROM golang:1.26.8 AS build
WORKDIR /src
# Dependencies first, so source edits reuse the module cache layer.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY cmd/ cmd/
COPY pkg/ pkg/
ARG TARGETOS=linux
ARG TARGETARCH=amd64
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -buildvcs=false -ldflags="-s -w -buildid=" -o /out/gateway ./cmd/gateway

FROM gcr.io/distroless/static-debian12:nonroot
LABEL org.opencontainers.image.title="karmada-exec-gateway" \
      org.opencontainers.image.source="https://github.com/karmada-exec-gateway/karmada-exec-gateway"
COPY --from=build /out/gateway /gateway
# distroless' nonroot user; the chart's securityContext uses the same id.
USER 65532:65532
EXPOSE 8443 8080
ENTRYPOINT ["/gateway"]
