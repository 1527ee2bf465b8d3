module github.com/aluad/aluad

go 1.26.8

require go.yaml.in/yaml/v3 v3.0.6

require (
	github.com/cockroachdb/datadriven v1.0.3
	github.com/stretchr/testify v1.12.1
)

require github.com/pmezard/go-difflib v1.0.0 // indirect
