// Command coredns is CoreDNS with only the plugins the node tier's cluster DNS uses
// (tests/node: the `cluster.local` zone from the API server's Services and EndpointSlices),
// so its build compiles those and not CoreDNS's cloud back ends. Plugins register themselves
// with caddy from their init functions; coremain orders them by dnsserver's directive list.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

func main() {
	coremain.Run()
}
