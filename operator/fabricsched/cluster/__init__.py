"""A local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
kube-schedulers) run as processes, for the demo and the integration tests.

Rule: adapter; knows nothing of placement.
"""
