"""The control loops: the Controller (TrainingJobs into children and status), the
Autoscaler (trainer counts from the cluster's free room) and `ControlLoops`, which
runs both on any `edl.cluster.port.Cluster`."""
