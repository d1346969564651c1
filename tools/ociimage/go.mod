// ociimage assembles meganode's container images (tools/ociimage/main.go). A module of its own,
// like the throw-away modules the Makefile builds etcdctl, kwok and helm in: go-containerregistry's
// dependencies must not move the versions the main module builds kube-apiserver with.
module github.com/meganode/meganode/tools/ociimage

go 1.26

require github.com/google/go-containerregistry v0.22.1

require (
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	golang.org/x/sync v0.22.0 // indirect
)
