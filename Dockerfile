# syntax=docker/dockerfile:1
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/warren ./cmd/warren

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/warren /usr/local/bin/warren
VOLUME /var/lib/warren
ENV WARREN_DATA_DIR=/var/lib/warren
EXPOSE 5672 15672
USER nonroot:nonroot
ENTRYPOINT ["/usr/local/bin/warren"]
