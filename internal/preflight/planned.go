package preflight

import (
	"context"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/bmcfence/bmcfence/cluster"
)

// CheckPlannedReboots: the planned-reboot signals of other tools the agent
// can watch (docs/safety.md, "Planned reboots"), each source's state:
// watched, not installed, or no RBAC.
const CheckPlannedReboots = "planned-reboots"

// checkPlannedReboots says, per source, whether it is there and whether
// the agent may watch it. A source that is not installed is fine; one that
// is installed but not granted warns: its reboots would be fenced like
// failures once they outlast fenceAfter.
func checkPlannedReboots(ctx context.Context, o Options) Result {
	r := Result{Scope: ScopeCluster, Check: CheckPlannedReboots, Status: StatusOK}
	var parts []string
	add := func(status Status, s string) {
		if status.rank() > r.Status.rank() {
			r.Status = status
		}
		parts = append(parts, s)
	}
	k := *o.Kured
	switch {
	case k.DaemonSet == "":
		add(StatusOK, "kured: off (plannedReboots.kured.daemonSet is empty)")
	default:
		what := fmt.Sprintf("DaemonSet %s/%s", k.Namespace, k.DaemonSet)
		_, err := o.Client.AppsV1().DaemonSets(k.Namespace).Get(ctx, k.DaemonSet, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			add(StatusOK, "kured: not installed (no "+what+")")
		case err != nil:
			add(StatusWarn, fmt.Sprintf("kured: cannot read %s: %v", what, err))
		default:
			add(o.grantedPlanned(ctx, "kured", what, kuredPermission(k)))
		}
	}
	for _, src := range []struct {
		name string
		gvrs []schema.GroupVersionResource
	}{
		{"NodeMaintenance", []schema.GroupVersionResource{cluster.NodeMaintenances}},
		{"Cluster API Machines", []schema.GroupVersionResource{cluster.MachinesV1beta1, cluster.MachinesV1beta2}},
	} {
		gvr, served, err := servedResource(o, src.gvrs)
		switch {
		case err != nil:
			add(StatusWarn, fmt.Sprintf("%s: cannot tell whether %s is served: %v", src.name, src.gvrs[0].GroupResource(), err))
		case !served:
			add(StatusOK, src.name+": not installed")
		default:
			add(o.grantedPlanned(ctx, src.name, gvr.GroupResource().String(), watchPermission(gvr)))
		}
	}
	r.Message = strings.Join(parts, "; ")
	return r
}

// servedResource returns the first of gvrs the API serves.
func servedResource(o Options, gvrs []schema.GroupVersionResource) (schema.GroupVersionResource, bool, error) {
	for _, gvr := range gvrs {
		list, err := o.Client.Discovery().ServerResourcesForGroupVersion(gvr.GroupVersion().String())
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return gvr, false, err
		}
		for _, res := range list.APIResources {
			if res.Name == gvr.Resource {
				return gvr, true, nil
			}
		}
	}
	return schema.GroupVersionResource{}, false, nil
}

// grantedPlanned asks whether the agent may watch one source.
func (o Options) grantedPlanned(ctx context.Context, source, what string, p permission) (Status, string) {
	user := "system:serviceaccount:" + o.Namespace + ":" + o.ServiceAccount
	groups := []string{"system:serviceaccounts", "system:serviceaccounts:" + o.Namespace, "system:authenticated"}
	var denied []string
	for _, verb := range p.Verbs {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
			User: user, Groups: groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: p.Namespace, Name: p.Name, Verb: verb, Group: p.Group, Resource: p.Resource},
		}}
		resp, err := o.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
		if err != nil {
			return StatusWarn, fmt.Sprintf("%s: installed (%s), cannot check the agent's grant: %v", source, what, err)
		}
		if !resp.Status.Allowed {
			denied = append(denied, verb)
		}
	}
	if len(denied) > 0 {
		return StatusWarn, fmt.Sprintf("%s: no RBAC: %s may not %s, so its planned reboots are not seen (apply deploy/base/rbac.yaml)", source, user, p.describe(denied))
	}
	return StatusOK, fmt.Sprintf("%s: watched (%s)", source, what)
}

// kuredPermission: the agent watches kured's DaemonSet by name.
func kuredPermission(k cluster.KuredLock) permission {
	return permission{Group: "apps", Resource: "daemonsets", Namespace: k.Namespace, Name: k.DaemonSet, Verbs: []string{"list", "watch"}}
}

// watchPermission: the agent watches a CR source cluster-wide.
func watchPermission(gvr schema.GroupVersionResource) permission {
	return permission{Group: gvr.Group, Resource: gvr.Resource, Verbs: []string{"list", "watch"}}
}

// plannedPermissions are what the agent needs to watch every source at
// kured's defaults (TestManifestGrantsEveryCheckedPermission checks that
// deploy/base grants them).
func plannedPermissions() []permission {
	return []permission{kuredPermission(cluster.DefaultKuredLock()), watchPermission(cluster.NodeMaintenances), watchPermission(cluster.MachinesV1beta1)}
}
