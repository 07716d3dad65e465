#!/usr/bin/env bash
# hack/prevstate.sh COMMIT: refresh fence/testdata/prevstate, the previous
# release's fence state decoder that fence.TestPreviousReleaseRefusesWhatItCannotRead
# runs on the states this version writes. Run it at each release with the
# commit (or tag) of the release before it; commit the result.
set -euo pipefail
commit=${1:?usage: hack/prevstate.sh COMMIT}
cd "$(git rev-parse --show-toplevel)"
dir=fence/testdata/prevstate
for f in codec.go phase.go state.go types.go guard.go policy.go; do
	git show "$commit:fence/$f" >"$dir/$f"
done
sed -i "s/as of commit [0-9a-f]*/as of commit $(git rev-parse --short "$commit")/" "$dir/doc.go"
go test -count=1 -run 'TestPreviousReleaseRefusesWhatItCannotRead' ./fence/
