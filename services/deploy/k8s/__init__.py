"""Kubernetes manifests for a placement (`distserve plan --emit k8s`) and the planner's Kubernetes actuator."""
