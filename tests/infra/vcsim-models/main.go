// vcsim-models serves one of govmomi's own simulator models, unpatched: simulator.VPX() (a vCenter)
// or simulator.ESX() (a standalone ESXi host), with the inventory and storage data govmomi ships
// (captured from real hosts). No scenario, no hook: what a client sees is what govmomi's authors
// made, so db2vtop's tests meet data no one on this project shaped.
//
//	vcsim-models --model vpx|esx [--listen 127.0.0.1:0]
//
// The first stdout line is URL=https://127.0.0.1:PORT/sdk. SIGTERM/SIGINT stop it.
package main

import (
	"crypto/tls"
	"flag"
	"fmt"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"github.com/vmware/govmomi/simulator"
)

func main() {
	name := flag.String("model", "vpx", "the model to serve: vpx (simulator.VPX) or esx (simulator.ESX)")
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("vcsim-models: ")

	var model *simulator.Model
	switch *name {
	case "vpx":
		model = simulator.VPX()
	case "esx":
		model = simulator.ESX()
	default:
		log.Fatalf("--model %q: expected vpx or esx", *name)
	}
	if err := model.Create(); err != nil {
		log.Fatal(err)
	}
	model.Service.TLS = new(tls.Config)
	model.Service.Listen = &url.URL{Host: *listen}
	server := model.Service.NewServer()
	u := *server.URL
	u.User = nil
	fmt.Printf("URL=%s\n", u.String())
	_ = os.Stdout.Sync()

	sig := make(chan os.Signal, 2)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	server.Close()
	model.Remove()
}
