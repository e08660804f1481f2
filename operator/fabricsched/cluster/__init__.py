"""A local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager,
kube-schedulers) run as processes, for the demo and the integration tests.

Rule: adapter; knows nothing of placement. Modules: ``binaries`` (pinned versions, paths),
``certs`` and ``kubeconfig`` (PKI and client configs), ``components`` (command lines, scheduler
specs), ``processes`` (start, state file, stop), ``controlplane`` (``up``/``down``), ``nodes``
(nodes files, creation), ``samples`` (sample fabrics), ``kubelet`` (pod status in place of a
kubelet), ``rest`` (a small JSON client), ``commands`` (``fabricsched cluster``).
"""
