//go:build tools

// Package tools pins the module's third-party dependencies so that parallel
// work on separate packages never has to edit go.mod at the same time.
package tools

import (
	_ "github.com/ebitengine/purego"
	_ "github.com/gofiber/fiber/v2"
	_ "github.com/mattn/go-sqlite3"
	_ "github.com/milvus-io/milvus-proto/go-api/v2/milvuspb"
	_ "github.com/milvus-io/milvus/client/v2/milvusclient"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/redis/go-redis/v9"
	_ "github.com/sashabaranov/go-openai"
	_ "golang.org/x/sync/singleflight"
	_ "google.golang.org/grpc"
	_ "gopkg.in/yaml.v3"
)
