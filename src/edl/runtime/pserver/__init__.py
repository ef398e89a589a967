"""Parameter servers: partition, optimizers, shard state, checkpoints, gRPC server."""
