# For those with Docker: one image for the agent and the CLI, with ipmitool
# (bmclib's IPMI provider runs it). Non-root, read-only root filesystem
# friendly. Without Docker, `make image` builds the shell-less image (no
# ipmitool: Redfish only) with go-containerregistry.
#   docker build -t bmcfence:dev .
FROM golang:1.26-bookworm AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 make build

FROM debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends ipmitool ca-certificates \
	&& rm -rf /var/lib/apt/lists/*
COPY --from=build /src/bin/fence-agent /src/bin/kubectl-fence /src/bin/bmcfence-cli /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/fence-agent"]
