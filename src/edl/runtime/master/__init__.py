"""The master: a task queue (pure core in `queue`) served over gRPC (`server`)."""
