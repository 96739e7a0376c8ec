# mcp-idempotent serve in a container: a static binary (no cgo) on
# distroless, run as an unprivileged user. See docs/packaging.md.
#
#   docker build -t mcp-idempotent --build-arg VERSION=1.2.3 .
#   docker run -p 8080:8080 mcp-idempotent serve --listen 0.0.0.0:8080 \
#     --upstream https://mcp.example.com/mcp
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/mcp-idempotent/mcp-idempotent/internal/cli.Version=${VERSION}" \
      -o /out/mcp-idempotent ./cmd/mcp-idempotent \
 && mkdir /out/data

# static: CA certificates (for https, rediss and TLS PostgreSQL), time
# zones and a nonroot user, and nothing else.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/mcp-idempotent /mcp-idempotent
# A place for sqlite:/data/records.db and journals; mount a volume here.
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
EXPOSE 8080
ENTRYPOINT ["/mcp-idempotent"]
CMD ["--help"]
