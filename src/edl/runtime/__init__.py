"""The training runtime inside a job: master (task queue), pservers (parameter
shards + optimizer + checkpoints) and the trainer API, speaking gRPC and
finding each other through etcd (`edl.coord`)."""
