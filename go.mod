module github.com/harbinger-mq/harbinger

go 1.26

require go.yaml.in/yaml/v3 v3.0.6 // indirect
