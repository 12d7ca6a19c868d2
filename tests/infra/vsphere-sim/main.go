// vsphere-sim serves the vSphere SOAP API (govmomi's simulator) with an inventory and
// performance values taken from a scenario file, for db2vtop's tests and benchmarks.
//
//	vsphere-sim --scenario FILE [--listen 127.0.0.1:0] [--esx]
//
// The first stdout line is URL=https://127.0.0.1:PORT/sdk. Any user/password is accepted.
// SIGTERM/SIGINT stop it; SIGUSR1 invalidates every session. GET /sim/stats returns the
// SOAP calls served so far, by method, as JSON; POST /sim/events posts events now (events.go).
package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"net/http"
	"net/http/pprof"
	"net/url"
	"os"
	"os/signal"
	"runtime/debug"
	"sync"
	"syscall"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
)

// calls counts SOAP requests by method and remembers session keys so SIGUSR1 can end them.
type calls struct {
	mu       sync.Mutex
	byMethod map[string]int
	sessions map[string]bool
	events   *EventLog
}

func (c *calls) hook(ctx *simulator.Context, m *simulator.Method) (mo.Reference, types.BaseMethodFault) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.byMethod[m.Name]++
	if ctx.Session != nil {
		c.sessions[ctx.Session.Key] = true
		c.events.session(ctx)
		return nil, nil
	}
	switch m.Name {
	case "RetrieveProperties", "RetrievePropertiesEx", "ContinueRetrievePropertiesEx":
		// the stock simulator serves these without a session; vCenter does not
		return nil, &types.NotAuthenticated{NoPermission: types.NoPermission{Object: &m.This, PrivilegeId: "System.View"}}
	}
	return nil, nil
}

func (c *calls) serveStats(w http.ResponseWriter, _ *http.Request) {
	c.mu.Lock()
	total := 0
	by := map[string]int{}
	for k, v := range c.byMethod {
		by[k] = v
		total += v
	}
	c.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"total": total, "methods": by, "pid": os.Getpid()})
}

// invalidate ends every session, as a vCenter restart or session timeout would.
func (c *calls) invalidate(sm *simulator.SessionManager) int {
	c.mu.Lock()
	keys := c.sessions
	c.sessions = map[string]bool{}
	c.mu.Unlock()
	ctx := &simulator.Context{Session: &simulator.Session{UserSession: types.UserSession{Key: "vsphere-sim-sigusr1"}}}
	n := 0
	for key := range keys {
		if sm.TerminateSession(ctx, &types.TerminateSession{SessionId: []string{key}}).Fault() == nil {
			n++
		}
	}
	return n
}

func main() {
	scenarioPath := flag.String("scenario", "", "scenario JSON file (required)")
	listen := flag.String("listen", "127.0.0.1:0", "address to listen on")
	esxMode := flag.Bool("esx", false, "serve a standalone ESXi host instead of vCenter")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("vsphere-sim: ")
	if os.Getenv("GOGC") == "" {
		// the simulator copies objects through XML for every property read; collect garbage
		// less often (memory is cheap here, CPU is shared with the client being measured)
		debug.SetGCPercent(400)
	}
	if *scenarioPath == "" {
		log.Fatal("--scenario FILE is required")
	}
	sc, err := loadScenario(*scenarioPath)
	if err != nil {
		log.Fatal(err)
	}

	var model *simulator.Model
	if *esxMode {
		model = simulator.ESX()
		model.Datastore, model.Machine = 0, 0
	} else {
		model = simulator.VPX()
		model.Datacenter, model.Cluster, model.ClusterHost, model.Host, model.Machine = 0, 0, 0, 0, 0
		model.Datastore, model.Portgroup, model.Pool, model.Folder = 0, 0, 0, 0
	}
	model.Autostart = false
	if err := model.Create(); err != nil {
		log.Fatal(err)
	}
	tmp, err := os.MkdirTemp("", "vsphere-sim-")
	if err != nil {
		log.Fatal(err)
	}
	stop := func(code int) {
		model.Remove()
		_ = os.RemoveAll(tmp)
		os.Exit(code)
	}
	b := &builder{ctx: context.Background(), sc: sc, esx: *esxMode, model: model, tmp: tmp}
	if err := b.build(); err != nil {
		log.Print(err)
		stop(2)
	}

	events := newEventLog(model.Map())
	eventRefs, err := events.postScenario(sc)
	if err != nil {
		log.Print(err)
		stop(2)
	}
	counter := &calls{byMethod: map[string]int{}, sessions: map[string]bool{}, events: events}
	model.Map().Handler = counter.hook
	model.Service.TLS = new(tls.Config)
	model.Service.Listen = &url.URL{Host: *listen}
	if sc.Login != nil {
		model.Service.Listen.User = url.UserPassword(sc.Login.User, sc.Login.Password)
	}
	model.Service.HandleFunc("/sim/stats", counter.serveStats)
	model.Service.HandleFunc("/sim/events", events.serveHTTP(eventRefs))
	// CPU profiles of the simulator itself, for benchmarks that ask where vCenter time goes
	model.Service.HandleFunc("/debug/pprof/profile", pprof.Profile)
	server := model.Service.NewServer()
	u := *server.URL
	u.User = nil
	fmt.Printf("URL=%s\n", u.String())
	_ = os.Stdout.Sync()

	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT, syscall.SIGUSR1)
	for s := range sig {
		if s == syscall.SIGUSR1 {
			log.Printf("SIGUSR1: %d session(s) invalidated", counter.invalidate(model.Map().SessionManager()))
			continue
		}
		server.Close()
		stop(0)
	}
}
