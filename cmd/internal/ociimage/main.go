// Command ociimage builds zrt's container image without a container
// daemon (deploy/image says how): a tarball that docker load and podman
// load read, and optionally an OCI image layout.
//
//	go run ./cmd/internal/ociimage --zrtc bin/linux-amd64/zrtc --zrt-run bin/linux-amd64/zrt-run -o bin/zrt-image.tar
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/zrtdev/zrt/deploy/image"
)

func main() {
	var o image.Options
	flag.StringVar(&o.Zrtc, "zrtc", "bin/linux-amd64/zrtc", "the static linux/amd64 zrtc binary")
	flag.StringVar(&o.ZrtRun, "zrt-run", "bin/linux-amd64/zrt-run", "the static linux/amd64 zrt-run binary")
	flag.StringVar(&o.Out, "o", "bin/zrt-image.tar", "write a tarball for docker load / podman load here (\"\": none)")
	flag.StringVar(&o.Layout, "layout", "", "also write an OCI image layout into this directory")
	flag.StringVar(&o.Tag, "tag", "zrt:latest", "the name the tarball loads as")
	flag.StringVar(&o.LibRoot, "lib-root", "/", "the root file system a dynamic binary's loader and libraries are copied from")
	flag.Parse()
	created, err := image.Created(os.Getenv("SOURCE_DATE_EPOCH"))
	if err == nil {
		o.Created = created
		var d fmt.Stringer
		if d, err = image.Write(o); err == nil {
			fmt.Printf("%s %s\n", o.Tag, d)
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ociimage:", err)
		os.Exit(1)
	}
}
