module github.com/bmcfence/bmcfence/test/redfishclients

go 1.26

require (
	github.com/bmcfence/bmcfence v0.0.0-00010101000000-000000000000
	github.com/stmcginnis/gofish v0.23.0
)

require (
	go.yaml.in/yaml/v2 v2.4.2 // indirect
	k8s.io/utils v0.0.0-20250604170112-4c0f3b243397 // indirect
	sigs.k8s.io/yaml v1.6.0 // indirect
)

replace github.com/bmcfence/bmcfence => ../..
