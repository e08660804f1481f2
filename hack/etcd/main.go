// Command etcd is a thin wrapper around etcd's server entry point, so that the
// server module can be built at a pinned version from the Go module proxy
// (etcd's own main package lives in a module that is not published on its own).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
