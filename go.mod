module nodeflow

go 1.26
