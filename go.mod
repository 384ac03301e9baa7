module github.com/zrtdev/zrt

go 1.26
