// Package clusterpb is the generated code of cluster.proto, the node-to-node gRPC service
// of internal/cluster. Regenerate with `go generate ./internal/cluster/clusterpb` (protoc
// from Debian's protobuf-compiler; the plugins are go.mod tools); CI fails when the
// committed code differs from what that produces.
package clusterpb

//go:generate sh -c "protoc --plugin=protoc-gen-go=$(go tool -n protoc-gen-go) --plugin=protoc-gen-go-grpc=$(go tool -n protoc-gen-go-grpc) --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative cluster.proto"
