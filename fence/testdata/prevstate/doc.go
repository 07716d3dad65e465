// Package fence here is a verbatim copy of the fence state codec of the
// previous release and the types it needs (fence/codec.go, phase.go,
// state.go, types.go, guard.go, policy.go as of commit d895f6d), so a test
// can run the previous release's decoder on the states this one writes
// (fence.TestPreviousReleaseRefusesWhatItCannotRead): during a rollout or a
// rollback an older leader reads what a newer one wrote, and must refuse
// what it cannot read rather than drop it.
//
// Never edit these files by hand. At each release, refresh them from the
// release before it: hack/prevstate.sh COMMIT (docs/safety.md, "Versions
// mix during rollouts"). This file is the only one not copied.
package fence
