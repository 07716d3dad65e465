// Package controlplane runs a real Kubernetes control plane for end-to-end
// tests: etcd, kube-apiserver, kube-controller-manager and kube-scheduler
// built from pinned Go modules by hack/e2e-bins.sh (`make e2e-bins`), plus one
// kwok process per fake node standing in for that node's kubelet.
//
// Everything binds 127.0.0.1 on free ports, lives in one work directory
// (certificates, kubeconfigs, logs/<component>.log) and dies with the test
// binary: every child runs in its own process group with Pdeathsig=SIGKILL,
// and Stop kills the groups and reaps them.
//
// What is real and what is simulated:
//
//   - Real: the apiserver (RBAC + Node authorizer, NodeRestriction), every
//     controller of kube-controller-manager (node lifecycle with Lease-based
//     health, taint eviction, pod GC, attach/detach, PV binder, StatefulSet...)
//     and the scheduler.
//   - kwok, one process per node, acting with that node's own identity
//     (system:node:NAME, Node authorizer + NodeRestriction, plus two read-only
//     RBAC grants kwok needs, see installKwokRBAC): registers the node Ready,
//     renews its Lease in kube-node-lease every 10 s (40 s duration, like a
//     kubelet), marks scheduled pods Running and finishes deleting
//     terminating pods. KillNode SIGKILLs it: the node's kubelet is dead,
//     nothing else changes. RestartNode deletes the stale Lease first (see
//     there) and starts a new kwok.
//   - In-process, started by Start (all with the admin client):
//     an external-attacher stand-in for the CSI driver CSIDriverName
//     (VolumeAttachment → status.attached=true, finalizer removed on
//     deletion); an external-provisioner stand-in for StorageClassName
//     (a CSI PV for each pending claim); and a kubelet volume-manager stand-in
//     that reports node.status.volumesInUse for the pods on each live node.
//     kwok does not report volumes; a real kubelet does, and the
//     attach/detach controller refuses a normal detach while a volume is in
//     use. The reporter of a killed node stops with it, so its volumes stay
//     "in use" as on a dead machine, and only the out-of-service taint (or the
//     6-minute unsafe timeout) detaches them.
//     node.status.volumesAttached is written by the attach/detach controller
//     itself, as in a real cluster.
//
// Missing binaries are a test failure, not a skip: the message says to run
// `make e2e-bins` (hack/e2e-bins.sh).
package controlplane
