# syntax=docker/dockerfile:1
# Build stage: a static binary (no cgo).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
# hashicorp/raft is built from Warren's copy (third_party/raft/README.warren.md).
COPY third_party/raft/go.mod third_party/raft/go.sum third_party/raft/
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/warren ./cmd/warren \
 && mkdir -p /out/data && chown 65532:65532 /out/data

# Run stage: nothing but the binary and its data directory.
FROM scratch
COPY --from=build /out/warren /usr/local/bin/warren
COPY --from=build --chown=65532:65532 /out/data /var/lib/warren
ENV WARREN_DATA_DIR=/var/lib/warren
# Clients reach a container from outside its loopback: as in RabbitMQ's official
# image (loopback_users.guest = false), guest may log in from anywhere. Set
# WARREN_DEFAULT_USER/WARREN_DEFAULT_PASS, or WARREN_LOOPBACK_USERS=guest, for anything
# but a trial.
ENV WARREN_LOOPBACK_USERS=""
VOLUME /var/lib/warren
EXPOSE 5672 5671 15672 15692
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/warren"]
