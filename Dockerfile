# syntax=docker/dockerfile:1
#
# The switchboard image, for those with a container engine: `make docker-build` (which
# passes the version arguments below), or for several platforms
#   docker buildx build --platform linux/amd64,linux/arm64 --build-arg VERSION=… .
# `make image` builds the same image without one (hack/tools/image): a static binary on an
# empty base with /etc/passwd and /etc/group (hack/tools/image/rootfs) and the CA bundle,
# run as 65532:65532, entrypoint /switchboard, no shell. Change the two together.

# The builder runs on the build machine's platform and cross-compiles for the target's.
FROM --platform=$BUILDPLATFORM golang:1.26.8 AS builder
ARG TARGETOS
ARG TARGETARCH
ARG VERSION=v0.0.0-dev
ARG COMMIT=unknown
ARG BUILD_DATE=1970-01-01T00:00:00Z
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=$TARGETOS GOARCH=$TARGETARCH go build -trimpath -buildvcs=false \
      -ldflags "-s -w \
        -X github.com/switchboard-dev/switchboard/runtime/version.version=${VERSION} \
        -X github.com/switchboard-dev/switchboard/runtime/version.commit=${COMMIT} \
        -X github.com/switchboard-dev/switchboard/runtime/version.date=${BUILD_DATE}" \
      -o /out/switchboard ./cmd/switchboard

FROM scratch
ARG VERSION=v0.0.0-dev
ARG COMMIT=unknown
ARG BUILD_DATE=1970-01-01T00:00:00Z
ARG LICENSES=NOASSERTION
# The runtime calls model providers over HTTPS: Debian's CA bundle from the builder, at
# the path Go's crypto/x509 reads first on Linux.
COPY --from=builder /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY hack/tools/image/rootfs/etc/passwd hack/tools/image/rootfs/etc/group /etc/
COPY --from=builder /out/switchboard /switchboard
LABEL org.opencontainers.image.title="switchboard" \
      org.opencontainers.image.description="A Kubernetes-native execution runtime for AI models" \
      org.opencontainers.image.source="https://github.com/switchboard-dev/switchboard" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${COMMIT}" \
      org.opencontainers.image.created="${BUILD_DATE}" \
      org.opencontainers.image.licenses="${LICENSES}"
USER 65532:65532
WORKDIR /
ENTRYPOINT ["/switchboard"]
