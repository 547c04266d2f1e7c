module github.com/harbinger-mq/harbinger/internal/predict

go 1.26.0
