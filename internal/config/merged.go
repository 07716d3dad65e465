package config

import (
	"errors"
	"fmt"
	"time"

	"github.com/bmcfence/bmcfence/fence"
	"github.com/bmcfence/bmcfence/internal/mutant"
)

// A merged per-node policy is the agent's policy with the settle windows of
// the node's inventory entry, or of inventory.defaults where the entry sets
// none (nodes from BareMetalHosts and annotations have no windows of their
// own). The runner fences each node under its merged policy, so each one is
// validated: at load (Validate) and whenever the inventory builds an entry
// (the inventory calls NodePolicyError), never used unchecked.

// windowScope is where a merged policy's settle windows may come from, most
// specific first.
type windowScope struct {
	// subject names the scope in an error ("inventory.nodes[0] (w1)");
	// field prefixes its fields ("inventory.nodes[0]").
	subject, field string
	s              BMCSettings
}

// DefaultsPolicyError validates the merged policy of a node whose windows
// come from inventory.defaults (or the policy): nil, or one error per line,
// each naming the field to fix.
func DefaultsPolicyError(base fence.Policy, defaults BMCSettings) error {
	return mergedPolicyError(base, []windowScope{{subject: "inventory.defaults", field: "inventory.defaults", s: defaults}},
		"nodes from BareMetalHosts, annotations and entries without settle windows of their own get both")
}

// NodePolicyError validates the merged policy of the node entry named
// subject ("inventory.nodes[3] (w4)", "node w4 (BareMetalHost m3/h4)"),
// whose own fields are named under field ("inventory.nodes[3]"; "" when the
// entry has none of its own, as a BareMetalHost's). A window the entry does
// not set comes from inventory.defaults, then the policy.
func NodePolicyError(base fence.Policy, defaults BMCSettings, subject, field string, own BMCSettings) error {
	scopes := []windowScope{{subject: "inventory.defaults", field: "inventory.defaults", s: defaults}}
	if field != "" {
		scopes = append([]windowScope{{subject: subject, field: field, s: own}}, scopes...)
	}
	err := mergedPolicyError(base, scopes, "")
	if err != nil && field == "" {
		return fmt.Errorf("%s: %w", subject, err)
	}
	return err
}

// mergedPolicyError validates base with the scopes' windows (the first
// scope setting a window wins). The settle rule names the most specific
// field involved and how to fix it in that scope; any other rule the
// windows break is said with the fields that set them.
func mergedPolicyError(base fence.Policy, scopes []windowScope, who string) error {
	if mutant.On(mutant.MergedPolicy) {
		// The mutant: the policy alone, as before issue 17.
		return nil
	}
	if base.Validate() != nil {
		return nil // said once, as the policy's own errors
	}
	type source struct {
		scope *windowScope // nil: the policy
		value time.Duration
	}
	settle, unassisted := source{value: base.SettleWindow}, source{value: base.UnassistedSettleWindow}
	for i := len(scopes) - 1; i >= 0; i-- {
		sc := &scopes[i]
		if sc.s.SettleWindow > 0 {
			settle = source{sc, sc.s.SettleWindow}
		}
		if sc.s.UnassistedSettleWindow > 0 {
			unassisted = source{sc, sc.s.UnassistedSettleWindow}
		}
	}
	if settle.scope == nil && unassisted.scope == nil {
		return nil // the policy's own windows: validated as the policy
	}
	rank := func(src source) int {
		for i := range scopes {
			if src.scope == &scopes[i] {
				return i
			}
		}
		return len(scopes)
	}
	name := func(src source, key string, subject bool) string {
		switch {
		case src.scope == nil:
			return "policy." + key
		case subject:
			return src.scope.subject + "." + key
		}
		return src.scope.field + "." + key
	}
	merged := base
	merged.SettleWindow, merged.UnassistedSettleWindow = settle.value, unassisted.value
	var errs []error
	if unassisted.value <= settle.value {
		why := ""
		if who != "" {
			why = "; " + who
		}
		if rank(settle) <= rank(unassisted) {
			fix := settle.scope.field
			errs = append(errs, fmt.Errorf("%s = %s: not shorter than %s = %s, so %w that long%s: set %s.unassistedSettleWindow longer than %s, or shorten %s.settleWindow",
				name(settle, "settleWindow", true), settle.value, name(unassisted, "unassistedSettleWindow", false), unassisted.value,
				fence.ErrSettleInsideDwell, why, fix, settle.value, fix))
		} else {
			fix := unassisted.scope.field
			errs = append(errs, fmt.Errorf("%s = %s: not longer than %s = %s, so %w that long%s: set %s.unassistedSettleWindow longer than %s, or set a shorter %s.settleWindow",
				name(unassisted, "unassistedSettleWindow", true), unassisted.value, name(settle, "settleWindow", false), settle.value,
				fence.ErrSettleInsideDwell, why, fix, settle.value, fix))
		}
	}
	if err := merged.Validate(); err != nil {
		var with []string
		if settle.scope != nil {
			with = append(with, fmt.Sprintf("%s = %s", name(settle, "settleWindow", false), settle.value))
		}
		if unassisted.scope != nil {
			with = append(with, fmt.Sprintf("%s = %s", name(unassisted, "unassistedSettleWindow", false), unassisted.value))
		}
		subject := scopes[0].subject
		if s := settle.scope; s != nil && (unassisted.scope == nil || rank(settle) <= rank(unassisted)) {
			subject = s.subject
		} else if unassisted.scope != nil {
			subject = unassisted.scope.subject
		}
		for _, e := range splitJoined(err) {
			if errors.Is(e, fence.ErrSettleInsideDwell) {
				continue // said above, in the scope's own terms
			}
			errs = append(errs, fmt.Errorf("%s: with %s: %w", subject, joinAnd(with), e))
		}
	}
	return errors.Join(errs...)
}

// splitJoined lists the errors errors.Join put together.
func splitJoined(err error) []error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

func joinAnd(parts []string) string {
	switch len(parts) {
	case 0:
		return ""
	case 1:
		return parts[0]
	}
	return parts[0] + " and " + parts[1]
}
