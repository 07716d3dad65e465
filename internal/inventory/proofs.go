package inventory

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/bmcfence/bmcfence/bmc/dial"
	"github.com/bmcfence/bmcfence/internal/kube"
	"github.com/bmcfence/bmcfence/pdu"
)

// RecordOutletProof stores a passed outlet identity test (pdu.VerifyOutlet)
// in the ConfigMap the agent reads (OutletProofsConfigMap, key: the node's
// name, value: a JSON list of proofs): it creates the ConfigMap when it is
// absent and replaces an earlier proof of the same outlet for that node.
func RecordOutletProof(ctx context.Context, c kube.Interface, namespace, node string, p pdu.OutletProof) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cms := c.CoreV1().ConfigMaps(namespace)
		cm, err := cms.Get(ctx, OutletProofsConfigMap, metav1.GetOptions{})
		create := apierrors.IsNotFound(err)
		if create {
			cm = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: OutletProofsConfigMap, Namespace: namespace,
				Labels: map[string]string{"app.kubernetes.io/part-of": "bmcfence"}}}
		} else if err != nil {
			return fmt.Errorf("reading ConfigMap %s/%s: %w", namespace, OutletProofsConfigMap, err)
		}
		var proofs []pdu.OutletProof
		if raw := cm.Data[node]; raw != "" {
			if err := json.Unmarshal([]byte(raw), &proofs); err != nil {
				return fmt.Errorf("ConfigMap %s/%s, key %s: %w (fix or delete the key)", namespace, OutletProofsConfigMap, node, err)
			}
		}
		kept := proofs[:0]
		for _, old := range proofs {
			if old.Outlet.Key() != p.Outlet.Key() {
				kept = append(kept, old)
			}
		}
		raw, err := json.Marshal(append(kept, p))
		if err != nil {
			return err
		}
		if cm.Data == nil {
			cm.Data = map[string]string{}
		}
		cm.Data[node] = string(raw)
		if create {
			_, err = cms.Create(ctx, cm, metav1.CreateOptions{})
		} else {
			_, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		}
		if apierrors.IsAlreadyExists(err) {
			return apierrors.NewConflict(corev1.Resource("configmaps"), OutletProofsConfigMap, err)
		}
		return err
	})
}

// LevelOutlet is one outlet of a node's fencing levels, for the outlet
// identity test.
type LevelOutlet struct {
	// Level is the fencing level's number (2 for the first below the BMC).
	Level int
	// Name is address and outlet, never a credential.
	Name   string
	Outlet pdu.Outlet
}

// Outlets lists the outlets of the node's fencing levels, level by level.
func (c *Controller) Outlets() []LevelOutlet {
	var out []LevelOutlet
	for _, l := range c.levels {
		pl, ok := l.(*pduLevel)
		if !ok {
			continue
		}
		for _, o := range pl.outlets {
			out = append(out, LevelOutlet{Level: pl.number, Name: o.name, Outlet: o.Outlet})
		}
	}
	return out
}

// Machine is the node's BMC as the outlet identity test reads it (its
// power, its power supplies, its identity); false when the BMC's protocol
// does not report power supplies (IPMI here).
func (c *Controller) Machine() (pdu.Machine, bool) {
	ctrl := c.ctrl
	if a, ok := ctrl.(*dial.Adapter); ok {
		ctrl = a.Controller
	}
	m, ok := ctrl.(pdu.Machine)
	return m, ok
}
